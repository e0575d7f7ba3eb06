"""``relmem``, the command line: the console script's entry point (the commands live in ``_cli``)."""

from ._cli import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
