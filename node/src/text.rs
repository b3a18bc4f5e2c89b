//! JavaScript strings read into one buffer the addon reuses ([`JsText::append_to`]): one
//! napi call and no allocation per string, where napi-rs's `String` asks its length first
//! (a second pass over it) and allocates. The request's words cross this way on every
//! request.

use std::ops::Range;

use napi::bindgen_prelude::{FromNapiValue, TypeName, ValidateNapiValue};
use napi::{check_status, sys, Error, Result, Status, ValueType};

/// A string argument, read later by [`JsText::append_to`] (within the call that got it).
pub struct JsText {
    env: sys::napi_env,
    value: sys::napi_value,
}

impl TypeName for JsText {
    fn type_name() -> &'static str {
        "string"
    }

    fn value_type() -> ValueType {
        ValueType::String
    }
}

impl ValidateNapiValue for JsText {}

impl FromNapiValue for JsText {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> Result<Self> {
        Ok(Self { env, value })
    }
}

/// Bytes a UTF-8 character takes at most from one UTF-16 unit or pair: a string written
/// with at least this much room left was not cut (V8 never writes part of a character).
const ROOM: usize = 4;

impl JsText {
    /// Appends the string's UTF-8 to `buf` (grown when too small, its capacity kept for the
    /// next call): where it is in `buf`. The whole of `buf` stays UTF-8.
    pub(crate) fn append_to(&self, buf: &mut Vec<u8>) -> Result<Range<usize>> {
        let start = buf.len();
        buf.reserve(64);
        let mut len = self.write(buf, start)?;
        if buf.capacity() - start - 1 - len < ROOM {
            // Perhaps cut short: its whole length, then again.
            // SAFETY: `env` and `value` are the live handles of the call that made `self`
            // (it is read within that call); a null buffer asks the length.
            check_status!(unsafe {
                sys::napi_get_value_string_utf8(
                    self.env,
                    self.value,
                    std::ptr::null_mut(),
                    0,
                    &mut len,
                )
            })?;
            buf.reserve(len + ROOM);
            len = self.write(buf, start)?;
        }
        // SAFETY: V8 wrote `len` bytes after `start`, within the capacity.
        unsafe { buf.set_len(start + len) };
        Ok(start..start + len)
    }

    /// Writes the string into `buf`'s spare capacity from `start` (V8 writes at most the
    /// room less one byte, then a NUL): the bytes written.
    fn write(&self, buf: &mut Vec<u8>, start: usize) -> Result<usize> {
        let mut len = 0;
        let spare = buf.spare_capacity_mut();
        // SAFETY: `env` and `value` as in `append_to`; the pointer and size are the spare
        // capacity's, which begins at `start` (the length).
        check_status!(unsafe {
            sys::napi_get_value_string_utf8(
                self.env,
                self.value,
                spare.as_mut_ptr().cast(),
                spare.len(),
                &mut len,
            )
        })
        .map_err(|_| Error::new(Status::StringExpected, "a string is expected"))?;
        debug_assert_eq!(buf.len(), start);
        Ok(len)
    }
}
