//! Which devices and drivers the CUDA backend accepts (issue #15), decided before any
//! cudarc call: compute capability 8.0+ (the kernels use sm_80 instructions; 7.x was
//! accepted and would fail in NVRTC or at launch) and a CUDA 13.0 driver (the bindings'
//! version; an older driver made cudarc's loader panic). Pure checks, no GPU.

use fp8c_runtime::cuda::{DeviceInfo, check_driver_version};

fn device(cc: (i32, i32), driver: i32) -> DeviceInfo {
    DeviceInfo {
        ordinal: 0,
        name: "test GPU".into(),
        compute_capability: cc,
        total_memory: 80 << 30,
        sm_count: 132,
        driver_version: driver,
    }
}

#[test]
fn hopper_with_a_cuda_13_driver_is_supported() {
    device((9, 0), 13000).check_supported().unwrap();
    device((8, 0), 13010).check_supported().unwrap();
    assert!(!device((8, 0), 13000).has_fp8() && device((8, 9), 13000).has_fp8());
}

#[test]
fn volta_and_turing_are_refused_with_the_reason() {
    for cc in [(7, 0), (7, 5)] {
        let e = device(cc, 13000).check_supported().unwrap_err();
        assert!(
            e.contains(&format!("{}.{}", cc.0, cc.1)) && e.contains("need 8.0 or newer"),
            "{e}"
        );
    }
}

#[test]
fn an_old_driver_is_an_error_naming_both_versions() {
    let e = check_driver_version(12040).unwrap_err();
    assert!(
        e.contains("CUDA 12.4") && e.contains("CUDA 13.0") && e.contains("580"),
        "{e}"
    );
    let e = device((9, 0), 12080).check_supported().unwrap_err();
    assert!(e.contains("CUDA 12.8"), "{e}");
    check_driver_version(13000).unwrap();
}
