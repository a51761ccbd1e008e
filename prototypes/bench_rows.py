"""The data rows of an `xtask bench` report (markdown), shared by the session scripts that
read them (`session39/compare.py`, `session40/glance.py`)."""


def table_rows(path):
    """Yield (section, cells) for every data row: the `## ` heading it sits under and its
    cells, stripped; header and separator rows are skipped."""
    section = ""
    for line in open(path):
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        if not line.startswith("| ") or line.startswith(("| shape", "| kg/ku")) or "---" in line:
            continue
        yield section, [c.strip() for c in line.strip().strip("|").split("|")]
