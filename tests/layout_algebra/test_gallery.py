"""`layout_algebra.gallery` and ``layout-algebra gallery``: the generator draws every picture
into PNG files with an index, the repository's ``docs/gallery`` holds exactly those files, and
every picture the README shows is one of them."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from layout_algebra.cli import main
from layout_algebra.errors import LayoutError
from layout_algebra.gallery import PICTURES, write_gallery

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NAMES = [picture.name for picture in PICTURES]


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, str]:
    """The command line run once into a fresh directory: exit code, directory, its output."""
    directory = tmp_path_factory.mktemp("gallery") / "nested" / "out"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["gallery", "--output", str(directory)])
    return code, directory, printed.getvalue()


def test_the_command_draws_every_picture_and_an_index(drawn: tuple[int, Path, str]) -> None:
    code, directory, printed = drawn
    assert code == 0
    expected = [directory / f"{name}.png" for name in NAMES] + [directory / "index.md"]
    assert printed.splitlines() == [f"wrote {path}" for path in expected]
    for path in expected[:-1]:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
        assert b"Software" not in data[:4096]  # no software version in the file
    index = (directory / "index.md").read_text(encoding="utf-8")
    assert re.findall(r"^## (\w+)$", index, re.MULTILINE) == NAMES
    for picture in PICTURES:
        assert f"{picture.caption}\n\n![{picture.name}]({picture.name}.png)" in index


def test_the_pictures_differ_from_each_other(drawn: tuple[int, Path, str]) -> None:
    _, directory, _ = drawn
    contents = {(directory / f"{name}.png").read_bytes() for name in NAMES}
    assert len(contents) == len(NAMES)


def test_the_repository_keeps_the_gallery_and_the_readme_shows_it() -> None:
    kept = sorted(path.name for path in (ROOT / "docs" / "gallery").iterdir())
    assert kept == sorted([f"{name}.png" for name in NAMES] + ["index.md"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = re.findall(r"!\[[^\]]*\]\(docs/gallery/(\w+)\.png\)", readme)
    assert len(shown) >= 3 and set(shown) <= set(NAMES)


def test_a_file_in_the_way_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory")
    with pytest.raises(LayoutError, match="exists and is not a directory"):
        write_gallery(blocker)
