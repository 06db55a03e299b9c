"""How to get a ``llama-server`` build on this distribution, in words a user can follow."""

from __future__ import annotations

from mtpstudio.core.distro import toolchain_command

UPSTREAM_GIT = "https://github.com/ggml-org/llama.cpp"
BUILD_DIR = "~/llama.cpp/build"


def build_steps(os_release: str, *, cuda: bool) -> list[str]:
    """The commands that build upstream llama-server where mtpstudio looks for it
    (``~/llama.cpp/build/bin``); ``cuda`` adds the CUDA backend (an NVIDIA card)."""
    cuda_flag = " -DGGML_CUDA=ON" if cuda else ""
    steps = [toolchain_command(os_release)]
    if cuda:
        steps[0] += " (and the CUDA toolkit of your NVIDIA driver)"
    steps += [
        f"git clone {UPSTREAM_GIT} ~/llama.cpp",
        f"cmake -S ~/llama.cpp -B {BUILD_DIR} -DCMAKE_BUILD_TYPE=Release{cuda_flag}",
        f"cmake --build {BUILD_DIR} -j --target llama-server",
    ]
    return steps


def build_hint(os_release: str, *, cuda: bool) -> str:
    """One paragraph: build one, then mtpstudio finds it."""
    steps = "; ".join(build_steps(os_release, cuda=cuda))
    return f"To build one: {steps}. mtpstudio finds it in {BUILD_DIR}/bin."
