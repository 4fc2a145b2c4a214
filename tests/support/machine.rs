//! What this machine has, read from sysfs: what the provider tests must
//! find, learnt without the code under test.

#![allow(dead_code)]

/// mlx5 devices as sysfs lists them.
pub fn sysfs_mlx5_devices() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/sys/class/infiniband") else { return vec![] };
    let mut v: Vec<String> =
        dir.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("mlx5")).collect();
    v.sort();
    v
}

/// GPUs in the KFD topology (nodes with SIMDs; CPU nodes have none).
pub fn kfd_gpus() -> usize {
    let Ok(dir) = std::fs::read_dir("/sys/class/kfd/kfd/topology/nodes") else { return 0 };
    dir.filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("properties")).is_ok_and(|p| {
                p.lines().any(|l| l.strip_prefix("simd_count ").is_some_and(|n| n.trim().parse::<u32>().is_ok_and(|n| n > 0)))
            })
        })
        .count()
}
