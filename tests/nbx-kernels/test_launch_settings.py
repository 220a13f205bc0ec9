"""Launch settings come from the device file in force, are looked up once per device, and follow
device_files.forget() when the files are read again."""
from nbx.core import device_files
from nbx.kernels import launch


def test_settings_are_the_device_files_and_are_read_again_after_forget(device):
    first = launch.tiles("elementwise", device)
    assert first == device_files.in_force(device).value("tiles.elementwise")
    assert launch.tiles("elementwise", device) is first  # cached: every launch asks
    facts = device_files.in_force(device)
    assert device_files.in_force(device) is facts
    device_files.forget()
    assert device_files.in_force(device) is not facts
    assert launch.tiles("elementwise", device) == first
