import click


@click.group()
def main() -> None:
    """agent-saga."""
