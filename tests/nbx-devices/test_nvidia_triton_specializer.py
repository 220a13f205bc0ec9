"""Triton 3.6's native argument specializer imports torch on its first call; nbx initializes it without."""
import subprocess
import sys
import textwrap

import pytest

from nbx.devices.nvidia.triton_driver import init_specializer_without_torch


def _fake_torch(tmp_path):
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("MARK = 'yes'\nclass Tensor:\n    pass\n")
    return str(tmp_path / "fake")


def _run(tmp_path, body: str) -> str:
    code = f"import sys; sys.path[:0] = {[_fake_torch(tmp_path)]!r}\n" + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_first_call_that_imports_torch_finds_it_refused_and_torch_stays_importable_after(tmp_path):
    out = _run(tmp_path, """
        from nbx.devices.nvidia.triton_driver import init_specializer_without_torch
        seen = []
        def first_call():  # what Triton 3.6's C++ init does: import torch, clear the error if it fails
            try:
                import torch
                seen.append("imported")
            except ImportError:
                seen.append("refused")
        assert init_specializer_without_torch(first_call)
        print(seen, "torch" in sys.modules)
        import torch
        print("after:", torch.MARK)
    """)
    assert "['refused'] False" in out and "after: yes" in out


def test_nothing_is_refused_once_the_process_imported_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", object())
    assert not init_specializer_without_torch(lambda: pytest.fail("the first call must not run"))


def test_tritons_own_specializer_answers_after_the_init_without_importing_torch(tmp_path):
    pytest.importorskip("triton._C.libtriton", reason="Triton's compiled module is needed")
    out = _run(tmp_path, """
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend
        from nbx.devices.nvidia.triton_driver import init_specializer_without_torch
        init_specializer_without_torch()
        print(native_specialize_impl(BaseBackend, 7, False, True, True), "torch" in sys.modules)
    """)
    assert "('i32', '') False" in out
