"""``python3 -m tooldir``: the same command line as the ``tooldir`` script."""

from ._cli import run

if __name__ == "__main__":
    run()
