; Inno Setup 6 script for Duet: installs dist\duet\ and makes .duet files open in Duet.
; Built by packaging\build_windows.ps1:  ISCC /DAppVersion=0.1.0 /DDistDir=C:\...\dist duet.iss
; Installs per user (no admin) by default; the dialog offers all users. HKA below means
; HKCU\Software\Classes for a per-user install and HKLM\Software\Classes for all users.

#ifndef AppVersion
  #define AppVersion "0.0.0"
#endif
#ifndef DistDir
  #define DistDir "..\..\dist"
#endif

[Setup]
AppId={{5B7C1E0A-3D2F-4C8B-9E61-7A4D2B9F0C13}
AppName=Duet
AppVersion={#AppVersion}
AppVerName=Duet {#AppVersion}
AppPublisher=Duet
DefaultDirName={autopf}\Duet
DefaultGroupName=Duet
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ChangesAssociations=yes
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir={#DistDir}
OutputBaseFilename=duet-{#AppVersion}-windows-x64-setup
SetupIconFile={#DistDir}\duet\duet.ico
UninstallDisplayIcon={app}\duet.exe
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#DistDir}\duet\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\Duet"; Filename: "{app}\duet.exe"
Name: "{autodesktop}\Duet"; Filename: "{app}\duet.exe"; Tasks: desktopicon

[Registry]
; .duet -> Duet.Session (a saved Duet conversation), opened by duet.exe "FILE"
Root: HKA; Subkey: "Software\Classes\.duet"; ValueType: string; ValueName: ""; ValueData: "Duet.Session"; Flags: uninsdeletevalue
Root: HKA; Subkey: "Software\Classes\.duet"; ValueType: string; ValueName: "Content Type"; ValueData: "application/x-duet-session"; Flags: uninsdeletevalue
Root: HKA; Subkey: "Software\Classes\.duet\OpenWithProgids"; ValueType: string; ValueName: "Duet.Session"; ValueData: ""; Flags: uninsdeletevalue
Root: HKA; Subkey: "Software\Classes\Duet.Session"; ValueType: string; ValueName: ""; ValueData: "Duet conversation"; Flags: uninsdeletekey
Root: HKA; Subkey: "Software\Classes\Duet.Session\DefaultIcon"; ValueType: string; ValueName: ""; ValueData: "{app}\duet.exe,0"
Root: HKA; Subkey: "Software\Classes\Duet.Session\shell\open\command"; ValueType: string; ValueName: ""; ValueData: """{app}\duet.exe"" ""%1"""
Root: HKA; Subkey: "Software\Classes\Applications\duet.exe"; ValueType: string; ValueName: "FriendlyAppName"; ValueData: "Duet"; Flags: uninsdeletekey
Root: HKA; Subkey: "Software\Classes\Applications\duet.exe\SupportedTypes"; ValueType: string; ValueName: ".duet"; ValueData: ""

[Run]
Filename: "{app}\duet.exe"; Description: "{cm:LaunchProgram,Duet}"; Flags: nowait postinstall skipifsilent
