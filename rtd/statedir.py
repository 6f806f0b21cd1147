"""Where the embedded default keeps its state: the one answer `rtd serve` and `rtctl` share,
in a module of its own so that rtctl finds it without importing the daemon's configuration."""
import os


def default_state_dir() -> str:
    """$RTD_STATE_DIR, else $XDG_STATE_HOME/rtd (~/.local/state/rtd); never relative to where
    a command happens to start."""
    explicit = os.environ.get("RTD_STATE_DIR")
    if explicit:
        return os.path.abspath(explicit)
    return os.path.join(os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "rtd")
