"""The certificates the repository ships pass `nbx autotune check`, cover every recorded H200 key,
and were timed as the method says: the L2 flushed by a read, the timed runs queued behind a hold
that outlasted their queueing."""
import json
from pathlib import Path

from nbx.core import cli
from nbx.devices.nvidia import flush

ROOT = Path(__file__).resolve().parents[2]
NVIDIA = ROOT / "certificates" / "nvidia"


def test_every_shipped_nvidia_certificate_passes_the_check(capsys):
    code = cli.main(["autotune", "check", str(ROOT / "certificates")])
    out = capsys.readouterr().out
    shipped = len(list((ROOT / "certificates").glob("*/*/*/*.json")))  # vendor/class/compiler/kernel.json
    assert shipped >= 7 and code == 0 and f"{shipped} certificate file(s), 0 refused" in out, out


def test_the_shipped_certificates_cover_every_recorded_h200_key(capsys):
    keys = ROOT / "certificates" / "keys" / "nvidia-h200-140gb.json"
    code = cli.main(["autotune", "coverage", "--keys", str(keys), "--certificates", str(ROOT / "certificates")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "missing" not in out.replace("nbx autotune coverage", "")


def test_every_shipped_proof_was_timed_after_a_read_flush_without_the_hosts_queueing_in_it():
    for path in sorted(NVIDIA.glob("*/*/*.json")):
        for key, entry in json.loads(path.read_text())["entries"].items():
            timing = entry["proof"]["timing"]
            assert timing["flush"] == flush.METHOD, (path.name, key, timing)
            assert timing["held_ms"] > 0 and timing["host_bound"] is False, (path.name, key, timing)


def test_every_shipped_setting_passes_its_kernels_rules_at_its_representative():
    """A rule added to a Tunable (a tile that spills, a depth a loop cannot use) leaves no shipped
    certificate serving a setting the certifier would now prune: serving does not check again."""
    from nbx.autotune.cli import _load_kernels
    from nbx.core import device_files
    declared, facts = _load_kernels(), device_files.for_arch("sm_90")
    for path in sorted((NVIDIA / "nvidia-h200-140gb").glob("*/*.json")):
        doc = json.loads(path.read_text())
        tunable = declared[doc["kernel"]]
        for key, entry in doc["entries"].items():
            reason = tunable.refusal(entry["setting"], facts, entry["proof"]["representative"])
            assert reason is None, (path.name, key, reason)
