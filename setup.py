"""Build glue: the cffi extension (sigmatrace._native) plus every native library and program
that native/build.py knows, placed under sigmatrace/_lib in the built package."""
import sys
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "native"))
import build as native_build  # noqa: E402


class BuildExtWithNative(build_ext):
    def run(self):
        super().run()
        out = HERE / "sigmatrace" / "_lib" if self.inplace else Path(self.build_lib) / "sigmatrace" / "_lib"
        for line in native_build.build_all(out):
            print(f"native: {line}")


setup(
    # hooks/ (the Frida agent) and probes/ (eBPF programs) ship inside the package so the code
    # that loads them finds them next to itself, installed or editable.
    packages=find_packages(include=["sigmatrace", "sigmatrace.*"]) + ["sigmatrace._hooks", "sigmatrace._probes"],
    package_dir={"sigmatrace._hooks": "hooks", "sigmatrace._probes": "probes"},
    cffi_modules=["native/ffi_build.py:ffibuilder"],
    cmdclass={"build_ext": BuildExtWithNative},
)
