//! A flow object's own `begin` and `feed`: functions that hold the flow's state
//! themselves, so a call reaches it without looking the object up.
//!
//! # Why not the class's methods
//!
//! A class method finds its Rust value from `this` with two lookups of private properties
//! per call (napi's unwrap, then napi-rs's check of the object's type tag): about a sixth
//! of what `Flow.begin` and `Flow.feed` cost besides the flow itself, on every request. A
//! function made with the state as its data gets it with the call's arguments. It holds
//! a count of the state (dropped by its finalizer), not a pointer into the object: taken
//! off the object, it stays valid. The class's methods stay (the same code), as the
//! declarations and for a caller of `Flow.prototype.begin`.

use std::ffi::{c_void, CStr};
use std::panic::AssertUnwindSafe;
use std::ptr;
use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi::{check_status, sys, JsError};

use crate::flow::FlowState;
use crate::reply::MaybeReply;
use crate::text::JsText;

/// Gives `object` its own `begin` and `feed`, on `state`.
pub(crate) fn own_methods(env: &Env, object: &Object<'_>, state: &Rc<FlowState>) -> Result<()> {
    define(env, object, c"begin", begin, state)?;
    define(env, object, c"feed", feed, state)
}

type Callback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

fn define(
    env: &Env,
    object: &Object<'_>,
    name: &CStr,
    callback: Callback,
    state: &Rc<FlowState>,
) -> Result<()> {
    let env = env.raw();
    let data = Rc::into_raw(Rc::clone(state)).cast_mut().cast::<c_void>();
    let mut function = ptr::null_mut();
    // SAFETY: `env` is the live env of the call making the object; `name` is NUL-ended.
    let made = check_status!(unsafe {
        sys::napi_create_function(env, name.as_ptr(), -1, Some(callback), data, &mut function)
    })
    .and_then(|()| {
        // SAFETY: as above; `function` was just made. From here its finalizer owns `data`.
        check_status!(unsafe {
            sys::napi_add_finalizer(
                env,
                function,
                data,
                Some(release),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        })
    });
    if let Err(e) = made {
        // SAFETY: `data` came from `Rc::into_raw` above and no finalizer owns it.
        drop(unsafe { Rc::from_raw(data.cast::<FlowState>()) });
        return Err(e);
    }
    let property = sys::napi_property_descriptor {
        utf8name: name.as_ptr(),
        name: ptr::null_mut(),
        method: None,
        getter: None,
        setter: None,
        value: function,
        attributes: sys::PropertyAttributes::default,
        data: ptr::null_mut(),
    };
    // SAFETY: `object` is a live object of `env`; one descriptor.
    check_status!(unsafe { sys::napi_define_properties(env, object.raw(), 1, &property) })
}

/// A function's finalizer: its count of the state.
unsafe extern "C" fn release(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Rc::into_raw` `define` gave this function, released once.
    drop(unsafe { Rc::from_raw(data.cast::<FlowState>()) });
}

/// The call's arguments (`undefined` past those given) and its function's state.
///
/// # Safety
/// `env` and `info` are the live handles of a call of a function `define` made.
unsafe fn arguments<'s, const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<([sys::napi_value; N], &'s FlowState)> {
    let mut argv = [ptr::null_mut(); N];
    let mut argc = N;
    let mut data = ptr::null_mut();
    // SAFETY: the caller's.
    check_status!(unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            &mut argc,
            argv.as_mut_ptr(),
            ptr::null_mut(),
            &mut data,
        )
    })?;
    // SAFETY: `data` is the state the function holds a count of until its finalizer runs,
    // which is after this call.
    Ok((argv, unsafe { &*data.cast::<FlowState>() }))
}

/// Returns `answer` to JavaScript, or throws its error (a panic too: none crosses).
///
/// # Safety
/// `env` is the live env of the call.
unsafe fn answer(
    env: sys::napi_env,
    answer: std::thread::Result<Result<String>>,
) -> sys::napi_value {
    let answer = answer
        .unwrap_or_else(|_| Err(Error::new(Status::GenericFailure, "the flow panicked")))
        // SAFETY: the caller's.
        .and_then(|s| unsafe { String::to_napi_value(env, s) });
    match answer {
        Ok(value) => value,
        Err(e) => {
            // SAFETY: the caller's.
            unsafe { JsError::from(e).throw_into(env) };
            ptr::null_mut()
        }
    }
}

/// `begin` (see `Flow.begin`).
unsafe extern "C" fn begin(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let run = || -> Result<String> {
        // SAFETY: a call of the function `define` made with this callback; every value
        // read is an argument of this call.
        unsafe {
            let ([method, path, headers, peer, request_id, route, now_ms], state) =
                arguments::<7>(env, info)?;
            state.begin(
                JsText::from_napi_value(env, method)?,
                JsText::from_napi_value(env, path)?,
                JsText::from_napi_value(env, headers)?,
                Option::<JsText>::from_napi_value(env, peer)?,
                JsText::from_napi_value(env, request_id)?,
                Option::<JsText>::from_napi_value(env, route)?,
                f64::from_napi_value(env, now_ms)?,
            )
        }
    };
    // SAFETY: `env` is this call's.
    unsafe { answer(env, std::panic::catch_unwind(AssertUnwindSafe(run))) }
}

/// `feed` (see `Flow.feed`).
unsafe extern "C" fn feed(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let run = || -> Result<String> {
        // SAFETY: as `begin`'s.
        unsafe {
            let ([id, reply, bans, now_ms], state) = arguments::<4>(env, info)?;
            state.feed(
                u32::from_napi_value(env, id)?,
                MaybeReply::from_napi_value(env, reply)?,
                Vec::<Option<i64>>::from_napi_value(env, bans)?,
                f64::from_napi_value(env, now_ms)?,
            )
        }
    };
    // SAFETY: `env` is this call's.
    unsafe { answer(env, std::panic::catch_unwind(AssertUnwindSafe(run))) }
}
