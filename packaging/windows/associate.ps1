# Make .duet files open in this unpacked Duet (the portable .zip), for the current user only.
# The installer (duet-*-setup.exe) does the same by itself.
# Usage: powershell -ExecutionPolicy Bypass -File associate.ps1 [-Remove]
param([switch]$Remove)
$ErrorActionPreference = "Stop"
$Exe = Join-Path $PSScriptRoot "duet.exe"
$Classes = "HKCU:\Software\Classes"

if ($Remove) {
    foreach ($key in "$Classes\Duet.Session", "$Classes\Applications\duet.exe") {
        if (Test-Path $key) { Remove-Item $key -Recurse }
    }
    if ((Test-Path "$Classes\.duet") -and ((Get-Item "$Classes\.duet").GetValue("") -eq "Duet.Session")) {
        Remove-Item "$Classes\.duet" -Recurse
    }
} else {
    if (-not (Test-Path $Exe)) { throw "associate.ps1: duet.exe is not beside this script" }
    New-Item -Path "$Classes\.duet" -Value "Duet.Session" -Force | Out-Null
    New-ItemProperty -Path "$Classes\.duet" -Name "Content Type" -Value "application/x-duet-session" -Force | Out-Null
    New-Item -Path "$Classes\.duet\OpenWithProgids" -Force | Out-Null
    New-ItemProperty -Path "$Classes\.duet\OpenWithProgids" -Name "Duet.Session" -Value "" -Force | Out-Null
    New-Item -Path "$Classes\Duet.Session" -Value "Duet conversation" -Force | Out-Null
    New-Item -Path "$Classes\Duet.Session\DefaultIcon" -Value "`"$Exe`",0" -Force | Out-Null
    New-Item -Path "$Classes\Duet.Session\shell\open\command" -Value "`"$Exe`" `"%1`"" -Force | Out-Null
}

# Tell Explorer that file associations changed (SHCNE_ASSOCCHANGED).
Add-Type -Namespace Duet -Name Shell -MemberDefinition @"
[System.Runtime.InteropServices.DllImport("shell32.dll")]
public static extern void SHChangeNotify(int eventId, uint flags, System.IntPtr item1, System.IntPtr item2);
"@
[Duet.Shell]::SHChangeNotify(0x08000000, 0, [IntPtr]::Zero, [IntPtr]::Zero)
if ($Remove) { "Duet no longer opens .duet files." } else { ".duet files now open with $Exe" }
