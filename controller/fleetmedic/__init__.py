"""fleetmedic: detect, fence and repair faulty GPU nodes."""


def __getattr__(name: str) -> str:
    # The version is looked up on first use: importlib.metadata costs ~35 ms of
    # start-up, which `fleetmedic scan` on a small file would otherwise always pay.
    if name != "__version__":
        raise AttributeError(f"module 'fleetmedic' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("fleetmedic")
    except PackageNotFoundError:  # running from a checkout without install
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
