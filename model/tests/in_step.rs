//! The model keeps in step with the Lua scripts: a script whose text changed since the model
//! was last brought in step with it fails here until the model's record of it changes too.
#![allow(clippy::panic)]

use std::path::Path;

use redquorum_model::scripts::{IN_STEP, text_hash};

#[test]
fn every_script_is_in_step_with_the_model() {
    let lua = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lua");
    let mut found = Vec::new();
    let entries = std::fs::read_dir(&lua).unwrap_or_else(|e| panic!("{}: {e}", lua.display()));
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".lua") {
            continue;
        }
        let text = std::fs::read(entry.path()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let hash = text_hash(&text);
        let Some((_, model, recorded)) = IN_STEP.iter().find(|(s, _, _)| *s == name) else {
            panic!(
                "lua/{name} is new: model it (model/src/scripts/) or say why not, and record it \
                 in IN_STEP with its hash {hash:#018x}"
            );
        };
        assert_eq!(
            *recorded, hash,
            "lua/{name} changed since the model was brought in step with it ({model}): change \
             the model with it, run its checks, and record the new hash {hash:#018x} in IN_STEP"
        );
        found.push(name);
    }
    for (name, _, _) in IN_STEP {
        assert!(
            found.iter().any(|f| f == name),
            "lua/{name} is gone: take it out of IN_STEP"
        );
    }
}
