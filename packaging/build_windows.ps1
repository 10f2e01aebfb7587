# Build Duet for Windows (x64):
#   dist\duet\                                   duet.exe (windowed), duet-console.exe (same app
#                                                with a console: --self-check), _internal\
#   dist\duet-<version>-windows-x64.zip          the folder, portable (associate.ps1 inside
#                                                registers .duet files for the current user)
#   dist\duet-<version>-windows-x64-setup.exe    Inno Setup 6 installer with the .duet file
#                                                association, when ISCC.exe is found
# Usage: powershell -ExecutionPolicy Bypass -File packaging\build_windows.ps1 [-Dist DIR] [-Work DIR] [-NoInstaller] [-SelfCheck]
#
# Needs: Python 3.11+ (python.org, "py" launcher), Visual Studio 2022 Build Tools (C++), CMake;
# llama-cpp-python is compiled from source into .venv the first time (CUDA build: set
# $env:CMAKE_ARGS = "-DGGML_CUDA=on" first, with the CUDA toolkit installed; Vulkan:
# "-DGGML_VULKAN=on"). Inno Setup 6 (https://jrsoftware.org) for the installer.
#
# Not run in this project's CI (Linux machines); kept in step with build_linux.sh by hand.
param(
    [string]$Dist = "dist",
    [string]$Work = "build\pyinstaller",
    [switch]$NoInstaller,
    [switch]$SelfCheck
)
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..")
$Root = (Get-Location).Path
$Dist = [IO.Path]::GetFullPath((Join-Path $Root $Dist))
$Work = [IO.Path]::GetFullPath((Join-Path $Root $Work))
$Py = Join-Path $Root ".venv\Scripts\python.exe"
$Started = Get-Date

function Invoke-Checked {
    param([string]$What, [scriptblock]$Command)
    & $Command
    if ($LASTEXITCODE -ne 0) { throw "build_windows.ps1: $What failed (exit $LASTEXITCODE)" }
}

if (-not (Test-Path $Py)) {
    Invoke-Checked "creating .venv" { py -3 -m venv .venv }
}
$ready = & $Py -c "import importlib.util as u; print(all(u.find_spec(m) for m in ('PyInstaller', 'llama_cpp', 'PySide6')))"
if ($ready -ne "True") {
    Write-Host "build_windows.ps1: installing Duet, llama-cpp-python (compiles, several minutes) and PyInstaller into .venv"
    Invoke-Checked "pip" { & $Py -m pip install --disable-pip-version-check -e ".[test,package]" }
}

$Version = & $Py -c "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))['project']['version'])"
New-Item -ItemType Directory -Force -Path $Work, $Dist | Out-Null
$Icon = Join-Path $Work "duet.ico"
Invoke-Checked "rendering the icon" { & $Py packaging\render_icons.py resources\icons\duet.svg $Icon }

$env:DUET_VERSION = $Version
$env:DUET_ICON = $Icon
Invoke-Checked "PyInstaller" {
    & $Py -m PyInstaller --noconfirm --log-level WARN --distpath $Dist --workpath $Work packaging\duet.spec
}
$App = Join-Path $Dist "duet"
Copy-Item $Icon (Join-Path $App "duet.ico")
Copy-Item packaging\windows\associate.ps1 (Join-Path $App "associate.ps1")

if ($SelfCheck) {
    Invoke-Checked "self-check" { & (Join-Path $App "duet-console.exe") --self-check }
}

$Zip = Join-Path $Dist "duet-$Version-windows-x64.zip"
if (Test-Path $Zip) { Remove-Item $Zip }
Compress-Archive -Path $App -DestinationPath $Zip

if (-not $NoInstaller) {
    $Iscc = (Get-Command iscc.exe -ErrorAction SilentlyContinue).Source
    if (-not $Iscc) {
        $Iscc = Join-Path ${env:ProgramFiles(x86)} "Inno Setup 6\ISCC.exe"
    }
    if (Test-Path $Iscc) {
        Invoke-Checked "Inno Setup" {
            & $Iscc /Q "/DAppVersion=$Version" "/DDistDir=$Dist" packaging\windows\duet.iss
        }
    } else {
        Write-Host "build_windows.ps1: Inno Setup 6 not found; no installer (the .zip is ready)"
    }
}
$Size = "{0:N0} MB" -f ((Get-ChildItem $App -Recurse -File | Measure-Object Length -Sum).Sum / 1MB)
Write-Host ("build_windows.ps1: {0} ({1}), done in {2:N0} s" -f $App, $Size, ((Get-Date) - $Started).TotalSeconds)
