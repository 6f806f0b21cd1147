"""How rtctl prints tables: rich tables whose cells fold and wrap to the terminal's width
(80 columns when stdout is not a terminal, or $COLUMNS), never cut off with an ellipsis.
rich is imported on first use: commands that print no table never pay for it."""


def table(title: str, *columns: str, ratios: tuple[int, ...] = ()):
    """A table of `columns`; `ratios` share the width out among them (rich's column ratio)."""
    from rich.table import Table
    result = Table(title=title)
    for i, column in enumerate(columns):
        result.add_column(column, overflow="fold", ratio=ratios[i] if ratios else None)
    return result


def show(renderable, stderr: bool = False) -> None:
    from rich.console import Console
    Console(stderr=stderr).print(renderable)
