"""The `# key: value` header of a labelled case file (tests/cases/README.md), shared by the case
runner (tests/python/test_cases.py) and the verifier benchmarks under bench/."""
from __future__ import annotations

from pathlib import Path


def parse_header(path: Path) -> dict[str, str]:
    """The leading `# key: value` comment lines of a case file."""
    fields: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields
