//! Owner ids that are stable for a process's lifetime and unique among contenders.

use rand::Rng;

/// A fresh owner id: `<host>-<pid>-<random suffix>`, e.g. `web-3-4181-9f2c41d7`.
///
/// Call it once at start-up and keep the value: an owner id must stay the same for the
/// process's lifetime (a new id on every request is an endless stream of new contenders) and
/// must differ between processes. Two processes with one id each take the other's renewals
/// for their own, so both believe they lead; the host name and pid tell instances apart in
/// logs, and the random suffix keeps ids unique when pids repeat (containers often all run
/// as pid 1) or host names are shared.
pub fn unique_owner_id() -> String {
    let suffix: u32 = rand::thread_rng().gen();
    format!("{}-{}-{suffix:08x}", host_name(), std::process::id())
}

/// The host name, reduced to characters that read well in ids and logs.
fn host_name() -> String {
    let raw = std::env::var("HOSTNAME")
        .ok()
        .filter(|name| !name.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_default();
    let cleaned: String = raw
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "host".to_owned()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_name_host_and_pid_and_differ_between_calls() {
        let a = unique_owner_id();
        let b = unique_owner_id();
        assert_ne!(a, b);
        assert!(
            a.contains(&format!("-{}-", std::process::id())),
            "{a} names the pid"
        );
        assert!(crate::validate::validate_name("lease owner", &a).is_ok());
    }
}
