// Settings a strategy chose for itself at start-up (the PS's key size and
// stream windows, ...) or took from an explicit flag, with the reason, so a
// run's manifest says what actually ran and why:
//   "settings": {"ps_chunk_kb": {"value": 64, "source": "auto: 2.5 MB ..."}}
// Process-wide and thread-safe; the manifest (manifest.h) includes them.
#pragma once

#include <string>

namespace gradsync {

// Records (or replaces) one setting. `source` is "flag" for an explicit flag,
// "auto: <why>" for a derived value, "default: <why>" for a fixed default.
void RecordSetting(const std::string& name, double value,
                   const std::string& source);

// {"name": {"value": v, "source": "..."}, ...} in name order; "{}" if none.
std::string RecordedSettingsJson();

// Records a flag given with a value the run does not use (a parameter-server
// setting under --sync=ring, say), with why: the manifest lists it under
// "ignored_flags" so that its "flags" echo is not read as if it applied.
void RecordIgnoredFlag(const std::string& name, const std::string& why);

// {"name": "why", ...} in name order; "{}" if none.
std::string IgnoredFlagsJson();

// For tests.
void ClearRecordedSettings();

}  // namespace gradsync
