//! Buffer views: dtype + length + where the memory lives.
//!
//! Views are what keeps [`crate::Communicator`] object-safe: one method serves
//! every element type, and a backend that cannot reach a location says so with
//! [`Error::Unsupported`] instead of a panic.

use crate::Backend;
use crate::element::{DType, Element};
use crate::error::{Error, Result};

/// Where a buffer's memory lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// Ordinary host memory.
    Host,
    /// CUDA device memory on the given device index.
    Cuda {
        /// CUDA device ordinal.
        device: i32,
    },
}

/// Where a view's elements are: host memory held as `H` (a shared or a
/// mutable slice), or a device pointer borrowed for as long as `H` would be.
#[derive(Clone, Debug)]
enum Mem<H> {
    Host(H),
    Device { ptr: u64, device: i32 },
}

/// `len` elements of `dtype`, in memory held as `H`. Used through its two
/// forms, [`Buffer`] (read-only) and [`BufferMut`] (writable), which share the
/// accessors below. A [`Buffer`] is `Clone` (a shared view); a
/// [`BufferMut`] is not.
#[derive(Clone, Debug)]
pub struct View<H> {
    dtype: DType,
    len: usize,
    mem: Mem<H>,
}

/// A read-only view of `len` elements of `dtype`.
pub type Buffer<'a> = View<&'a [u8]>;

/// A writable view of `len` elements of `dtype`.
pub type BufferMut<'a> = View<&'a mut [u8]>;

impl<H> View<H> {
    fn on_host(dtype: DType, len: usize, bytes: H) -> Self {
        View {
            dtype,
            len,
            mem: Mem::Host(bytes),
        }
    }
    /// Host bytes as elements of `dtype`, refusing a partial element.
    fn of_bytes(dtype: DType, bytes: H) -> Result<Self>
    where
        H: AsRef<[u8]>,
    {
        let n = bytes.as_ref().len();
        if n % dtype.size() != 0 {
            return Err(Error::InvalidArgument(format!(
                "{n} bytes is not a whole number of {dtype} elements"
            )));
        }
        Ok(View::on_host(dtype, n / dtype.size(), bytes))
    }
    fn on_device(ptr: u64, len: usize, dtype: DType, device: i32) -> Self {
        View {
            dtype,
            len,
            mem: Mem::Device { ptr, device },
        }
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Size in bytes.
    pub fn byte_len(&self) -> usize {
        self.len * self.dtype.size()
    }
    /// Where the memory lives.
    pub fn location(&self) -> Location {
        match self.mem {
            Mem::Host(_) => Location::Host,
            Mem::Device { device, .. } => Location::Cuda { device },
        }
    }
    /// The device pointer, if this is device memory.
    pub fn device_ptr(&self) -> Option<u64> {
        match self.mem {
            Mem::Device { ptr, .. } => Some(ptr),
            Mem::Host(_) => None,
        }
    }
}

/// What a backend that only reaches host memory says about a device buffer.
fn not_host(backend: Backend, device: i32) -> Error {
    Error::Unsupported {
        backend,
        what: format!("buffers in CUDA device {device} memory"),
    }
}

impl<'a> Buffer<'a> {
    /// Views a typed host slice.
    pub fn from_slice<T: Element>(s: &'a [T]) -> Self {
        View::on_host(T::DTYPE, s.len(), bytemuck::cast_slice(s))
    }

    /// Views raw host bytes as elements of `dtype`.
    pub fn from_bytes(dtype: DType, bytes: &'a [u8]) -> Result<Self> {
        View::of_bytes(dtype, bytes)
    }

    /// Views device memory.
    ///
    /// # Safety
    /// `ptr` must point to at least `len * dtype.size()` readable bytes on CUDA
    /// device `device`, valid for `'a`.
    pub unsafe fn from_device_ptr(ptr: u64, len: usize, dtype: DType, device: i32) -> Self {
        View::on_device(ptr, len, dtype, device)
    }

    /// The host bytes, or `Unsupported` for `backend` if the memory is on a device.
    pub fn host_bytes(&self, backend: Backend) -> Result<&[u8]> {
        match &self.mem {
            Mem::Host(b) => Ok(b),
            Mem::Device { device, .. } => Err(not_host(backend, *device)),
        }
    }
}

impl<'a> BufferMut<'a> {
    /// Views a typed mutable host slice.
    pub fn from_slice<T: Element>(s: &'a mut [T]) -> Self {
        View::on_host(T::DTYPE, s.len(), bytemuck::cast_slice_mut(s))
    }

    /// Views raw mutable host bytes as elements of `dtype`.
    pub fn from_bytes(dtype: DType, bytes: &'a mut [u8]) -> Result<Self> {
        View::of_bytes(dtype, bytes)
    }

    /// Views writable device memory.
    ///
    /// # Safety
    /// `ptr` must point to at least `len * dtype.size()` writable bytes on CUDA
    /// device `device`, valid and not aliased elsewhere for `'a`.
    pub unsafe fn from_device_ptr(ptr: u64, len: usize, dtype: DType, device: i32) -> Self {
        View::on_device(ptr, len, dtype, device)
    }

    /// The host bytes, or `Unsupported` for `backend` if the memory is on a device.
    pub fn host_bytes_mut(&mut self, backend: Backend) -> Result<&mut [u8]> {
        match &mut self.mem {
            Mem::Host(b) => Ok(b),
            Mem::Device { device, .. } => Err(not_host(backend, *device)),
        }
    }
    /// A read-only reborrow.
    pub fn as_buffer(&self) -> Buffer<'_> {
        View {
            dtype: self.dtype,
            len: self.len,
            mem: match &self.mem {
                Mem::Host(b) => Mem::Host(b),
                &Mem::Device { ptr, device } => Mem::Device { ptr, device },
            },
        }
    }
}
