"""GUI test fixtures: canned detection reports and a wizard factory (offscreen Qt, pytest-qt)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot
from support.xvfb import xvfb_display as _xvfb_display

from mtpstudio.core.detect.models import (
    Connector,
    DetectionReport,
    DisplayInfo,
    EngineInfo,
    GpuInfo,
    GpuMemory,
    GpuProcess,
    GpuVendor,
    HostInfo,
    PcieLink,
)
from mtpstudio.core.detect.processes import ProcessCategory
from mtpstudio.core.engines.build import MtpSupport
from mtpstudio.core.engines.profiles.ik import DOCUMENTED_FLAGS as IK_FLAGS
from mtpstudio.core.engines.profiles.upstream import DOCUMENTED_FLAGS as UPSTREAM_FLAGS
from mtpstudio.core.engines.profiles.upstream import DOCUMENTED_SPEC_TYPES
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import SpeedInputs
from mtpstudio.core.server.process import stop_pid
from mtpstudio.core.server.state import Liveness, load_states, prune_stale
from mtpstudio.ui.settings import StateStore
from mtpstudio.ui.wizard import MtpWizard

MIB = 1024 * 1024
GIB = 1024 * MIB

UPSTREAM_BINARY = "/opt/llama.cpp/build/bin/llama-server"
IK_BINARY = "/opt/ik_llama.cpp/build/bin/llama-server"


def upstream_engine(accepted: frozenset[str] = UPSTREAM_FLAGS) -> EngineInfo:
    return EngineInfo(
        path=UPSTREAM_BINARY,
        real_path=UPSTREAM_BINARY,
        found_in="/opt",
        flavour="upstream",
        version="b6780",
        build_number=6780,
        backends=["CUDA", "CPU"],
        accepted_flags=sorted(accepted),
        rejected_flags=["--mlock", "--no-mmap", "--draft-max"],
        spec_types=list(DOCUMENTED_SPEC_TYPES),
        mtp=MtpSupport.AVAILABLE,
    )


def ik_engine() -> EngineInfo:
    return EngineInfo(
        path=IK_BINARY,
        real_path=IK_BINARY,
        found_in="/opt",
        flavour="ik",
        version="4020",
        backends=["CUDA", "CPU"],
        accepted_flags=sorted(IK_FLAGS),
        mtp=MtpSupport.UNKNOWN_UNTIL_LAUNCH,
    )


def gpu_report(engines: list[EngineInfo] | None = None) -> DetectionReport:
    """A desktop: RTX 4070 SUPER driving DP-1 with KDE on it, and an idle AMD iGPU."""
    nvidia = GpuInfo(
        id="CUDA0",
        vendor=GpuVendor.NVIDIA,
        name="NVIDIA GeForce RTX 4070 SUPER",
        integrated=False,
        pci_bus_id="0000:01:00.0",
        driver="nvidia",
        driver_version="570.153.02",
        memory=GpuMemory(
            total_bytes=12282 * MIB, used_bytes=1400 * MIB, free_bytes=10882 * MIB, source="nvml v2"
        ),
        pcie=PcieLink(current_gen=4, max_gen=4, current_width=16, max_width=16),
        connectors=[Connector(card="card0", name="DP-1", status="connected", enabled=True)],
        drives_display=True,
    )
    igpu = GpuInfo(
        id="card1",
        vendor=GpuVendor.AMD,
        name="AMD Raphael",
        integrated=True,
        driver="amdgpu",
        memory=GpuMemory(total_bytes=512 * MIB, used_bytes=40 * MIB, free_bytes=472 * MIB),
    )
    processes = [
        GpuProcess(
            gpu_id="CUDA0",
            pid=1201,
            name="kwin_wayland",
            used_bytes=700 * MIB,
            category=ProcessCategory.COMPOSITOR,
        ),
        GpuProcess(
            gpu_id="CUDA0", pid=1202, name="Xwayland", used_bytes=80 * MIB,
            category=ProcessCategory.COMPOSITOR,
        ),
        GpuProcess(
            gpu_id="CUDA0", pid=1300, name="plasmashell", used_bytes=310 * MIB,
            category=ProcessCategory.DESKTOP_SHELL,
        ),
        GpuProcess(
            gpu_id="CUDA0", pid=2000, name="firefox", used_bytes=250 * MIB,
            category=ProcessCategory.BROWSER,
        ),
    ]  # fmt: skip
    return DetectionReport(
        gpus=[nvidia, igpu],
        processes=processes,
        display=DisplayInfo(
            session_type="wayland",
            desktop="KDE",
            display_manager="sddm",
            kwin_compositing="OpenGL",
            display_gpu_ids=["CUDA0"],
            connectors=nvidia.connectors,
        ),
        host=HostInfo(
            cpu_model="AMD Ryzen 7 7800X3D 8-Core Processor",
            physical_cores=8,
            logical_cpus=16,
            ram_total_bytes=64 * GIB,
            ram_available_bytes=50 * GIB,
            os_name="Arch Linux",
            kernel="6.15.2-arch1-1",
        ),
        engines=engines if engines is not None else [upstream_engine(), ik_engine()],
    )


def no_gpu_report() -> DetectionReport:
    """A headless box: no GPU, no engine."""
    return DetectionReport(
        host=HostInfo(
            cpu_model="Intel Xeon",
            physical_cores=2,
            logical_cpus=2,
            ram_total_bytes=24 * GIB,
            ram_available_bytes=22 * GIB,
        ),
        problems=[
            "No GPU found: NVML library not found and no AMD/Intel GPU in /sys/class/drm — "
            "planning works for a catalogue GPU or the CPU."
        ],
    )


WizardFactory = Callable[..., MtpWizard]


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(tmp_path / "config")


@pytest.fixture
def make_wizard(qtbot: QtBot, store: StateStore) -> Iterator[WizardFactory]:
    """``make_wizard(plan=None, report=gpu_report(), remember=True) -> MtpWizard``, settled, at
    the default 1180 x 820 (``default_size=False``: as the wizard sized itself)."""
    made: list[MtpWizard] = []

    def make(
        plan: Plan | None = None,
        report: DetectionReport | None = None,
        remember: bool = True,
        detector: Callable[[], DetectionReport] | None = None,
        default_size: bool = True,
    ) -> MtpWizard:
        canned = report if report is not None else gpu_report()
        wizard = MtpWizard(
            plan,
            detector=detector or (lambda: canned),
            store=store,
            remember=remember,
            speed_loader=SpeedInputs,  # the stated desktop: figures that do not hang on this CPU
        )
        qtbot.addWidget(wizard)
        wizard.tell_finished = lambda text: setattr(wizard, "last_finished", text)  # type: ignore[method-assign]
        if default_size:  # the offscreen screen is 800 px wide: keep the tests' window size
            wizard.resize(1180, 820)
        made.append(wizard)
        assert wizard.tasks.wait_idle(30)
        return wizard

    yield make
    for wizard in made:
        wizard.tasks.shutdown()


def go_to(wizard: MtpWizard, page_id: int) -> None:
    """Press Next until ``page_id`` is the current page."""
    wizard.show()
    while wizard.currentId() < page_id:
        before = wizard.currentId()
        wizard.next()
        wizard.tasks.wait_idle(30)
        assert wizard.currentId() != before, f"stuck on page {before}"


FULLSIZE_NAME = "Qwen3.6-35B-A3B-IQ4_XS.gguf"


@pytest.fixture
def fullsize_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home folder holding the full-size zero-weight Qwen3.6-35B-A3B IQ4_XS (sparse, 17.9 GiB
    apparent) at ``~/models/Qwen3.6-35B-A3B-IQ4_XS.gguf``; HOME points at it.

    The folder is a short one in the temp dir (``/tmp/mtpstudio-XXXXXXXX/home/alice``), so
    paths are as long as a user's, not as long as pytest's.
    """
    from devkit.zero_gguf import zero_gguf_for_card

    scratch = Path(tempfile.mkdtemp(prefix="mtpstudio-"))
    home = scratch / "home" / "alice"
    zero_gguf_for_card("qwen3.6-35b-a3b-iq4_xs", home / "models" / FULLSIZE_NAME)
    monkeypatch.setenv("HOME", str(home))
    yield home
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture
def xvfb_display() -> Iterator[str]:
    """A private Xvfb on a free display number: its ``DISPLAY`` value."""
    with _xvfb_display() as display:
        yield display


@pytest.fixture
def no_server_left() -> Iterator[None]:
    """After the test, stop every llama-server it left running and prune the records (the
    launch and tuning tests start real servers)."""
    yield
    for state in load_states():
        if state.liveness() is Liveness.RUNNING:
            stop_pid(state.pid, state.start_ticks, grace=3.0)
    prune_stale()
