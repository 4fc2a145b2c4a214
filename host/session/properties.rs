//! getProperties: what both plugins report about a NIC. They differ only in
//! the offload they announce (type, version) and in maxRecvs.

use crate::error::Result;
use crate::ffi::nccl::{NcclNetProperties, NcclNetVDeviceProps};
use crate::provider::Provider;
use crate::bad_arg;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, CString};
use std::sync::Mutex;

/// What a plugin announces about itself in ncclNetProperties_v12.
#[derive(Clone, Copy, Debug)]
pub struct Offload {
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub max_recvs: c_int,
}

/// Strings RCCL keeps pointers to: made once per device and kept.
fn device_strings(dev: usize, name: &str, pci: &str) -> (*mut c_char, *mut c_char) {
    static STRINGS: Mutex<Option<HashMap<(usize, String), (CString, CString)>>> = Mutex::new(None);
    let mut g = STRINGS.lock().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    let e = map
        .entry((dev, name.to_string()))
        .or_insert_with(|| (CString::new(name).unwrap_or_default(), CString::new(pci).unwrap_or_default()));
    (e.0.as_ptr() as *mut c_char, e.1.as_ptr() as *mut c_char)
}

/// getProperties of `provider`'s device `dev`.
pub fn fill(provider: &dyn Provider, dev: c_int, offload: Offload, props: &mut NcclNetProperties) -> Result<()> {
    if dev < 0 {
        return Err(bad_arg!("dev {dev} is negative"));
    }
    let info = provider.info(dev as usize)?;
    let (name, pci) = device_strings(dev as usize, &info.name, &info.pci_path);
    let mut v_props = NcclNetVDeviceProps { ndevs: 1, ..Default::default() };
    v_props.devs[0] = dev;
    *props = NcclNetProperties {
        name,
        pci_path: pci,
        guid: info.guid,
        ptr_support: info.ptr_support,
        reg_is_global: 0,
        force_flush: 0,
        speed: info.speed_mbps,
        port: info.port,
        latency: info.latency_us,
        max_comms: 65536,
        max_recvs: offload.max_recvs,
        net_device_type: offload.net_device_type,
        net_device_version: offload.net_device_version,
        v_props,
        max_p2p_bytes: info.max_message as usize,
        max_coll_bytes: info.max_message as usize,
        max_multi_request_size: 1,
        rail_id: 0,
        plane_id: 0,
    };
    Ok(())
}
