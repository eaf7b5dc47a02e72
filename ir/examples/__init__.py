"""Example tile programs, written with the builder; the demo and the tests import them."""
