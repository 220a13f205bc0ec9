"""No tracked file carries a merge's conflict markers (a README once shipped with both sides)."""
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKERS = ("<<<<<<< ", ">>>>>>> ")


def test_no_tracked_text_file_holds_merge_conflict_markers():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in files:
        if not name.endswith((".py", ".md", ".yml", ".yaml", ".toml", ".json", ".txt", ".sh", ".cfg")):
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if line.startswith(MARKERS) or line == "=======" and name.endswith(".py"):
                found.append(f"{name}:{number}")
    assert not found, found
