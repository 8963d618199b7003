"""The fixtures the suite's layers use, as a pytest plugin module registered by the runner: the device under test
(`device_name`, `device`, `caps`) and the other usable devices (`other_device`, for the copies layer)."""

from __future__ import annotations

from typing import Any

import pytest

DEVICE_KEY = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def device_name(request: pytest.FixtureRequest) -> str:
    return request.config.stash[DEVICE_KEY]


@pytest.fixture(scope="session")
def device(device_name: str) -> Any:
    from lazy.plugins import Device

    return Device[device_name]


@pytest.fixture(scope="session")
def caps(device: Any) -> Any:
    return device.renderer.caps


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires(feature): skipped when the device's Capabilities.unsupported lists it")


@pytest.fixture(autouse=True)
def _skip_declared_unsupported(request: pytest.FixtureRequest) -> None:
    """A test marked `requires("kernels")` is skipped, with the device's own reason, when the device declares it does
    not support that feature (a copy-only device declares ("kernels", why) in its Capabilities.unsupported)."""
    marker = request.node.get_closest_marker("requires")
    if marker is None:
        return
    reasons = dict(request.getfixturevalue("caps").unsupported)
    for feature in marker.args:
        if feature in reasons:
            pytest.skip(f"{request.getfixturevalue('device_name')} declares no {feature}: {reasons[feature]}")


def usable_other_devices(device: str) -> list[str]:
    """Every device other than `device` whose probe says it is usable."""
    from lazy.plugins import Device

    base = Device.canonicalize(device).partition(":")[0]
    return [name for name in sorted(Device.specs()) if name != base and Device.probe(name)[0]]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "other_device" in metafunc.fixturenames:
        others = usable_other_devices(metafunc.config.stash[DEVICE_KEY])
        metafunc.parametrize("other_device", others or [None], ids=others or ["no-other-device"])
