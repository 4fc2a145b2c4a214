//! C ABI mirrors of what RCCL passes to a GIN backend and an RMA plugin, at
//! the pinned RCCL revision (docs/rccl-abi.md lists the sources). Every struct
//! has size and offset assertions (tests/abi_mirror.rs checks them against
//! the facts of RCCL's headers, written out independently of the macros
//! below).
//!
//! RCCL's RMA interface began as a copy of GIN v13 (rma_v13.h: `typedef
//! ncclGin_v13_t ncclRma_v13_t`), so ncclGin_v14/v15 and ncclRma_v13..v17
//! share one slot order and differ in a few slots and signatures. The macros here
//! write that order and those signatures once; each version states only what
//! differs.

/// A plugin vtable in RCCL's slot order: name, init, devices, the version's
/// property slots, getProperties, listen, connect, createContext, regMrSym,
/// regMrSymDmaBuf, deregMrSym, destroyContext, closeColl, closeListen, the
/// version's data-path slots, queryLastError, finalize. Every slot is a
/// nullable C function pointer.
macro_rules! plugin_vtable {
    (
        $(#[$doc:meta])*
        $name:ident {
            properties: [$($prop:ident: $prop_ty:ty),* $(,)?],
            connect: $conn:ty,
            create_context: $cc:ty,
            reg_mr_sym: $reg:ty,
            reg_mr_sym_dma_buf: $reg_dmabuf:ty,
            data_path: [$($dp:ident: $dp_ty:ty),* $(,)?] $(,)?
        }
    ) => {
        $(#[$doc])*
        #[repr(C)]
        pub struct $name {
            pub name: *const std::ffi::c_char,
            pub init: Option<$crate::ffi::gin::InitFn>,
            pub devices: Option<$crate::ffi::gin::DevicesFn>,
            $(pub $prop: Option<$prop_ty>,)*
            pub get_properties: Option<$crate::ffi::gin::GetPropertiesFn>,
            pub listen: Option<$crate::ffi::gin::ListenFn>,
            pub connect: Option<$conn>,
            pub create_context: Option<$cc>,
            pub reg_mr_sym: Option<$reg>,
            pub reg_mr_sym_dma_buf: Option<$reg_dmabuf>,
            pub dereg_mr_sym: Option<$crate::ffi::gin::DeregMrSymFn>,
            pub destroy_context: Option<$crate::ffi::gin::PtrFn>,
            pub close_coll: Option<$crate::ffi::gin::PtrFn>,
            pub close_listen: Option<$crate::ffi::gin::PtrFn>,
            $(pub $dp: Option<$dp_ty>,)*
            pub query_last_error: Option<$crate::ffi::gin::QueryLastErrorFn>,
            pub finalize: Option<$crate::ffi::gin::PtrFn>,
        }

        // SAFETY: a vtable is immutable static data (a name literal and
        // function pointers), shared read-only across threads.
        unsafe impl Sync for $name {}
    };
}

/// A vtable value (an exported static's initializer). The slots every
/// version fills the same way take the shared C functions of
/// [`crate::session::thunks`] for plugin `$plugin`, and the functions named
/// `dereg_mr_sym`, `destroy_context`, `close_coll` and `query_last_error` in
/// the calling module; the version names the rest (`slot: function`). A
/// version whose connect differs (RMA v17's abortFlag) names it with
/// `connect: f` before the braces.
macro_rules! plugin_vtable_value {
    ($ty:ident, $plugin:ty, $name:expr, { $($slot:ident: $f:expr),* $(,)? }) => {
        plugin_vtable_value!($ty, $plugin, $name, connect: $crate::session::thunks::connect::<$plugin>, { $($slot: $f),* })
    };
    ($ty:ident, $plugin:ty, $name:expr, connect: $connect:expr, { $($slot:ident: $f:expr),* $(,)? }) => {
        $ty {
            name: $name.as_ptr(),
            init: Some($crate::session::thunks::init::<$plugin>),
            devices: Some($crate::session::thunks::devices::<$plugin>),
            get_properties: Some($crate::session::thunks::get_properties::<$plugin>),
            listen: Some($crate::session::thunks::listen::<$plugin>),
            connect: Some($connect),
            close_listen: Some($crate::session::thunks::close_listen::<$plugin>),
            finalize: Some($crate::session::thunks::finalize::<$plugin>),
            dereg_mr_sym: Some(dereg_mr_sym),
            destroy_context: Some(destroy_context),
            close_coll: Some(close_coll),
            query_last_error: Some(query_last_error),
            $($slot: Some($f),)*
        }
    };
}
pub(crate) use plugin_vtable_value;

/// createContext with the version's config and, where the version has one,
/// the device-handle out-parameter (GIN; RMA v13).
macro_rules! create_context_fn {
    ($name:ident, $config:ty $(, $dev_handle:ident)?) => {
        pub type $name = unsafe extern "C" fn(
            coll_comm: *mut std::ffi::c_void,
            config: *mut $config,
            ctx: *mut *mut std::ffi::c_void,
            $($dev_handle: *mut *mut $crate::ffi::nccl::NcclNetDeviceHandle,)?
        ) -> $crate::ffi::nccl::NcclResult;
    };
}

/// connect with the version's trailing arguments (RMA v17's abortFlag).
macro_rules! connect_fn {
    ($name:ident $(, $extra:ident: $extra_ty:ty)?) => {
        pub type $name = unsafe extern "C" fn(
            ctx: *mut std::ffi::c_void,
            handles: *mut *mut std::ffi::c_void,
            nranks: std::ffi::c_int,
            rank: std::ffi::c_int,
            listen_comm: *mut std::ffi::c_void,
            coll_comm: *mut *mut std::ffi::c_void,
            $($extra: $extra_ty,)?
        ) -> $crate::ffi::nccl::NcclResult;
    };
}

/// regMrSym and regMrSymDmaBuf with the out-parameters the version returns:
/// `mhandle`, and `ginHandle` too in GIN and RMA v13.
macro_rules! reg_fns {
    ($reg:ident, $reg_dmabuf:ident, ($($out:ident),+)) => {
        pub type $reg = unsafe extern "C" fn(
            coll_comm: *mut std::ffi::c_void,
            data: *mut std::ffi::c_void,
            size: usize,
            type_: std::ffi::c_int,
            mr_flags: u64,
            $($out: *mut *mut std::ffi::c_void,)+
        ) -> $crate::ffi::nccl::NcclResult;
        pub type $reg_dmabuf = unsafe extern "C" fn(
            coll_comm: *mut std::ffi::c_void,
            data: *mut std::ffi::c_void,
            size: usize,
            type_: std::ffi::c_int,
            offset: u64,
            fd: std::ffi::c_int,
            mr_flags: u64,
            $($out: *mut *mut std::ffi::c_void,)+
        ) -> $crate::ffi::nccl::NcclResult;
    };
}

/// A config struct: every member a C int, in the order listed.
macro_rules! c_int_struct {
    ($(#[$doc:meta])* $name:ident { $($field:ident),+ $(,)? }) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name {
            $(pub $field: std::ffi::c_int,)+
        }
    };
}

pub mod boundary;
pub mod gin;
pub mod nccl;
pub mod rma;
