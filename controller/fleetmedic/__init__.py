"""fleetmedic: detect, fence and repair faulty GPU nodes."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fleetmedic")
except PackageNotFoundError:  # running from a checkout without install
    __version__ = "0.0.0+unknown"
