"""How rtctl prints tables: rich tables whose cells fold and wrap to the terminal's width
(80 columns when stdout is not a terminal, or $COLUMNS), never cut off with an ellipsis."""
from rich.console import Console
from rich.table import Table


def table(title: str, *columns: str) -> Table:
    result = Table(title=title)
    for column in columns:
        result.add_column(column, overflow="fold")
    return result


def show(renderable, stderr: bool = False) -> None:
    Console(stderr=stderr).print(renderable)
