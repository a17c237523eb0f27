//! The layers of `lock-core` (docs/architecture.md) hold: no module imports from a layer above its own, and every
//! module is in the table, so a new one is placed on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Bottom to top. Within a layer modules may use each other; across layers only downwards. The seam and the engine
/// are one folder each, so a module of theirs is named by its folder.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundation",
        &[
            "error",
            "rt",
            "lost",
            "token",
            "holder",
            "resource",
            "namespace",
            "layout",
            "wire",
            "lease",
            "options",
            "telemetry",
        ],
    ),
    ("seam", &["seam", "memory"]),
    ("engine", &["engine", "distributed_lock"]),
    (
        "primitives",
        &[
            "mutex",
            "redisson",
            "multi",
            "semaphore",
            "election",
            "job",
            "rwlock",
            "fenced",
            "scoped",
            "distributed_election",
            "revision",
        ],
    ),
    ("guide", &["guide"]),
    // What a backend author needs, re-exported from the layers below (the application's names are the crate root's).
    ("backend interface", &["backend"]),
];

/// Each top-level module of `src` and the top-level modules its code (not its comments or unit tests) names as
/// `crate::module`.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files: Vec<(String, String)> = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap();
                let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
                let module = first.trim_end_matches(".rs").to_owned();
                if module != "lib" {
                    files.push((module, std::fs::read_to_string(&path).unwrap()));
                }
            }
        }
    }
    let names: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = names.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    for (module, text) in &files {
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
        for line in code.lines().map(|line| line.split("//").next().unwrap_or_default()) {
            // `crate::a::…`, and each name of `crate::{a, b::…}`.
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let group = rest.strip_prefix('{').map(|g| g.split('}').next().unwrap_or_default());
                let candidates: Vec<&str> = match group {
                    Some(group) => {
                        group.split(',').map(|part| part.trim().split("::").next().unwrap_or_default()).collect()
                    }
                    None => {
                        vec![rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap_or_default()]
                    }
                };
                for target in candidates {
                    if names.contains(target) && target != module {
                        graph.get_mut(module).unwrap().insert(target.to_owned());
                    }
                }
            }
        }
    }
    graph
}

#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layer_of: BTreeMap<&str, usize> =
        LAYERS.iter().enumerate().flat_map(|(i, (_, modules))| modules.iter().map(move |m| (*m, i))).collect();
    let graph = imports(&src);
    let unplaced: Vec<&String> = graph.keys().filter(|m| !layer_of.contains_key(m.as_str())).collect();
    assert!(unplaced.is_empty(), "modules in no layer (add them to LAYERS and docs/architecture.md): {unplaced:?}");
    let mut upward = Vec::new();
    for (module, targets) in &graph {
        for target in targets {
            let (from, to) = (layer_of[module.as_str()], layer_of[target.as_str()]);
            if to > from {
                upward.push(format!("{module} ({}) -> {target} ({})", LAYERS[from].0, LAYERS[to].0));
            }
        }
    }
    assert!(upward.is_empty(), "imports that run up the layers:\n{}", upward.join("\n"));
    // The check sees imports at all: the engine uses the seam, a primitive the engine.
    assert!(graph["engine"].contains("seam") && graph["semaphore"].contains("engine"), "{graph:?}");
}
