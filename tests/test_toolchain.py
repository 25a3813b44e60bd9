"""torch.compile's toolchain: found or missing, and the one line a user reads when it is missing."""

from __future__ import annotations

from tuneup.hardware.toolchain import Toolchain, compile_blocker, find_toolchain


def _which(*present: str):
    return lambda name: f"/usr/bin/{name}" if name in present else None


def _spec(found: bool):
    return lambda name: object() if found else None


def test_cc_from_the_environment_wins_then_the_usual_names() -> None:
    tools = find_toolchain(
        which=_which("gcc", "clang-17"),
        env={"CC": "clang-17"},
        find_spec=_spec(True),
        find_library=lambda name: "libcuda.so.1",
    )
    assert tools == Toolchain("/usr/bin/clang-17", True, "libcuda.so.1")
    assert find_toolchain(which=_which("gcc"), env={}, find_spec=_spec(True)).c_compiler == (
        "/usr/bin/gcc"
    )


def test_libcuda_is_looked_for_where_drivers_put_it() -> None:
    def globber(pattern: str) -> list[str]:
        return ["/opt/drv/libcuda.so.550"] if pattern.startswith("/opt/drv") else []

    tools = find_toolchain(
        which=_which(),
        env={"TRITON_LIBCUDA_PATH": "/opt/drv"},
        find_spec=_spec(False),
        find_library=lambda name: None,
        globber=globber,
    )
    assert tools == Toolchain(None, False, "/opt/drv/libcuda.so.550")


def test_what_blocks_compile_on_the_cpu_and_on_cuda() -> None:
    complete = Toolchain("/usr/bin/cc", True, "libcuda.so.1")
    assert compile_blocker(complete, device_is_cuda=True) is None
    no_cc = compile_blocker(Toolchain(None, True, "libcuda.so.1"), device_is_cuda=False)
    assert no_cc is not None and "C compiler" in no_cc and "gcc" in no_cc
    # Triton and libcuda matter only on CUDA
    assert compile_blocker(Toolchain("/usr/bin/cc", False, None), device_is_cuda=False) is None
    no_triton = compile_blocker(Toolchain("/usr/bin/cc", False, "x"), device_is_cuda=True)
    assert no_triton is not None and "pip install triton" in no_triton
    no_lib = compile_blocker(Toolchain("/usr/bin/cc", True, None), device_is_cuda=True)
    assert no_lib is not None and "TRITON_LIBCUDA_PATH" in no_lib
