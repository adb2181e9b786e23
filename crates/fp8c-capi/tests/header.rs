//! include/fp8c.h is what cbindgen makes of this crate's source now (cbindgen.toml): a
//! change to the API without regenerating the header fails here. `FP8C_BLESS=1 cargo test
//! -p fp8c-capi --test header` rewrites it.

use std::path::Path;

#[test]
fn the_committed_header_is_cbindgens_output() {
    let krate = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(krate.join("cbindgen.toml")).unwrap();
    let mut builder = cbindgen::Builder::new().with_config(config);
    for file in ["src/lib.rs", "src/status.rs"] {
        builder = builder.with_src(krate.join(file));
    }
    let mut fresh = Vec::new();
    builder.generate().unwrap().write(&mut fresh);
    let fresh = String::from_utf8(fresh).unwrap();
    let header = krate.join("../../include/fp8c.h");
    if std::env::var_os("FP8C_BLESS").is_some() {
        std::fs::write(&header, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(&header).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/fp8c.h is stale: regenerate it with FP8C_BLESS=1 cargo test --release -p fp8c-capi --test header"
    );
}
