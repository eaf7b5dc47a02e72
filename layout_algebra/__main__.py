"""`python -m layout_algebra`: the same command line as the `layout-algebra` console script."""

from layout_algebra.cli import main

raise SystemExit(main())
