"""``python -m packwise ...`` runs the ``packwise`` command."""

from packwise.cli import run

if __name__ == "__main__":
    run()
