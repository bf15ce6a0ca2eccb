"""``python -m tenure``: the same as the ``tenure`` command."""

from .cli import main

if __name__ == "__main__":
    main()
