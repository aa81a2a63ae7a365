"""The toolchain that makes an image's wheels chooses them for the image's interpreter, not the host's."""

from __future__ import annotations

from hvdflow.images.build.toolchain import Toolchain


def _values(options: list[str], flag: str) -> list[str]:
    return [options[i + 1] for i, option in enumerate(options) if option == flag]


def test_the_wheels_are_chosen_for_the_images_python_and_every_manylinux_tag_its_glibc_takes() -> None:
    # Debian 11: Python 3.9.2 and glibc 2.31. The full version matters: cryptography excludes 3.9.0 and 3.9.1
    options = Toolchain(None, "3.9.2", "2.31").pip_target()
    assert _values(options, "--python-version") == ["3.9.2"] and _values(options, "--abi") == ["cp39"]
    assert _values(options, "--implementation") == ["cp"]
    platforms = _values(options, "--platform")
    assert platforms[:2] == ["manylinux_2_31_x86_64", "manylinux_2_30_x86_64"]
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64",
            "manylinux_2_5_x86_64", "linux_x86_64"} <= set(platforms)
    assert "manylinux_2_32_x86_64" not in platforms and "manylinux_2_4_x86_64" not in platforms


def test_an_older_glibc_gets_no_tag_it_cannot_load() -> None:
    platforms = _values(Toolchain(None, "3.8.10", "2.12").pip_target(), "--platform")
    assert "manylinux2014_x86_64" not in platforms and "manylinux2010_x86_64" in platforms
    assert _values(Toolchain(None, "3.11.2", "2.36").pip_target(), "--abi") == ["cp311"]
