"""Charts for the tooling scripts (matplotlib, Debian's python3-matplotlib).

Every chart is written twice, PNG for reading and SVG for documents.  When
matplotlib is not importable the scripts still write their tables and say
the chart was skipped.
"""
import os


def pyplot():
    """matplotlib.pyplot on the file-only backend, or None."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        return None


SKIPPED = "chart skipped: matplotlib not importable (apt-get install python3-matplotlib)"


def save(fig, base_path):
    """Writes base_path.png and base_path.svg (each through a temporary
    file and a rename); returns the two paths."""
    paths = []
    for ext, kw in (("png", {"dpi": 110}), ("svg", {})):
        path = f"{base_path}.{ext}"
        tmp = os.path.join(os.path.dirname(os.path.abspath(path)), "." + os.path.basename(path) + ".tmp")
        fig.savefig(tmp, format=ext, **kw)
        os.replace(tmp, path)
        paths.append(path)
    return paths
