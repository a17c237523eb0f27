#!/usr/bin/env python3
"""Writes (or checks) the public API of each published crate: one line per public item, with its signature.

    scripts/public_api.py            # rewrite api/<crate>.txt
    scripts/public_api.py --check    # fail, with the difference, when the API is not what api/ says

The API is read from rustdoc's JSON output on the stable toolchain (``RUSTC_BOOTSTRAP=1`` lets stable rustdoc
write it): every item a user can name from the crate's root (through public modules and re-exports), each
function's and method's signature (``async``, ``unsafe``, ``const``, its arguments and its return type), public
fields, enum variants with their fields, traits with their items, and the trait implementations of the crate's
types (but the compiler's auto and blanket ones). A change to any of them is a change to ``api/``, reviewed with
the code (CONTRIBUTING says how). Signatures are rendered from rustdoc's types; generic bounds on a function are
shown in a ``where`` clause, lifetimes are left out (they rarely make or break a caller's code).
"""

import argparse
import difflib
import json
import os
import subprocess
import sys

CRATES = ["lock-core", "lock-redis-rs", "lock-fred", "lock-etcd", "lock-testkit"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rustdoc_json(crate):
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    env.pop("RUSTDOCFLAGS", None)
    subprocess.run(
        ["cargo", "rustdoc", "-q", "-p", crate, "--all-features", "--lib", "--",
         "-Z", "unstable-options", "--output-format", "json"],
        cwd=ROOT, env=env, check=True)
    path = os.path.join(ROOT, "target", "doc", crate.replace("-", "_") + ".json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class Api:
    def __init__(self, doc):
        self.doc = doc
        self.index = doc["index"]
        self.paths = doc.get("paths", {})
        self.lines = set()

    # -- types --------------------------------------------------------------------------------------------------

    def path_name(self, path):
        name = path.get("path") or path.get("name") or "?"
        return name.split("::")[-1] + self.args(path.get("args"))

    def args(self, args):
        if not args:
            return ""
        if "angle_bracketed" in args:
            ab = args["angle_bracketed"]
            parts = []
            for arg in ab.get("args", []):
                if "type" in arg:
                    parts.append(self.ty(arg["type"]))
                elif "const" in arg:
                    parts.append(str(arg["const"].get("expr", "_")))
            for c in ab.get("constraints", ab.get("bindings", [])):
                binding = c.get("binding", {})
                if "equality" in binding:
                    eq = binding["equality"]
                    parts.append("%s = %s" % (c["name"], self.ty(eq["type"]) if "type" in eq else "_"))
                elif "constraint" in binding:
                    parts.append("%s: %s" % (c["name"], self.bounds(binding["constraint"]) or "_"))
            return "<%s>" % ", ".join(parts) if parts else ""
        if "parenthesized" in args:
            p = args["parenthesized"]
            out = "(%s)" % ", ".join(self.ty(t) for t in p.get("inputs", []))
            if p.get("output"):
                out += " -> " + self.ty(p["output"])
            return out
        return ""

    def bounds(self, bounds):
        out = []
        for b in bounds:
            if "trait_bound" in b:
                tb = b["trait_bound"]
                modifier = "?" if tb.get("modifier") == "maybe" else ""
                out.append(modifier + self.path_name(tb["trait"]))
            elif "outlives" in b:
                continue
            elif "use" in b:
                continue
        return " + ".join(out)

    def ty(self, t):
        if t is None:
            return "()"
        (kind, v), = t.items()
        if kind == "resolved_path":
            return self.path_name(v)
        if kind == "dyn_trait":
            return "dyn " + " + ".join(self.path_name(x["trait"]) for x in v.get("traits", []))
        if kind in ("generic", "primitive"):
            return v
        if kind == "tuple":
            return "(%s)" % ", ".join(self.ty(x) for x in v)
        if kind == "slice":
            return "[%s]" % self.ty(v)
        if kind == "array":
            return "[%s; %s]" % (self.ty(v["type"]), v["len"])
        if kind == "impl_trait":
            return "impl " + (self.bounds(v) or "Sized")
        if kind == "borrowed_ref":
            return "&" + ("mut " if v.get("is_mutable") else "") + self.ty(v["type"])
        if kind == "raw_pointer":
            return "*" + ("mut " if v.get("is_mutable") else "const ") + self.ty(v["type"])
        if kind == "qualified_path":
            return "<%s as %s>::%s" % (self.ty(v["self_type"]), self.path_name(v["trait"]) if v.get("trait") else "_",
                                       v["name"])
        if kind == "function_pointer":
            sig = v.get("sig") or v.get("decl")
            return "fn(%s) -> %s" % (", ".join(self.ty(x[1]) for x in sig["inputs"]), self.ty(sig.get("output")))
        return kind

    # -- items --------------------------------------------------------------------------------------------------

    def fn_line(self, path, item, f):
        sig = f.get("sig") or f.get("decl")
        header = f.get("header", {})
        words = ["pub"]
        for flag, word in (("is_const", "const"), ("is_async", "async"), ("is_unsafe", "unsafe")):
            if header.get(flag) or header.get(flag.replace("is_", "")):
                words.append(word)
        params = []
        for name, t in sig["inputs"]:
            if name == "self":
                params.append(self.self_param(t))
            else:
                params.append("%s: %s" % (name, self.ty(t)))
        out = "%s fn %s(%s)" % (" ".join(words), path, ", ".join(params))
        if sig.get("output"):
            out += " -> " + self.ty(sig["output"])
        out += self.where(f.get("generics", {}))
        return out

    def self_param(self, t):
        if "borrowed_ref" in t:
            return "&mut self" if t["borrowed_ref"].get("is_mutable") else "&self"
        if t == {"generic": "Self"}:
            return "self"
        return "self: " + self.ty(t)

    def where(self, generics):
        preds = []
        for p in generics.get("params", []):
            kind = p.get("kind", {})
            if "type" in kind and not kind["type"].get("is_synthetic", kind["type"].get("synthetic")):
                bounds = self.bounds(kind["type"].get("bounds", []))
                if bounds:
                    preds.append("%s: %s" % (p["name"], bounds))
        for w in generics.get("where_predicates", []):
            if "bound_predicate" in w:
                bp = w["bound_predicate"]
                bounds = self.bounds(bp["bounds"])
                if bounds:
                    preds.append("%s: %s" % (self.ty(bp["type"]), bounds))
        return " where " + ", ".join(preds) if preds else ""

    def public(self, item):
        return item.get("visibility") == "public"

    def walk(self, item_id, path, seen):
        item = self.index.get(str(item_id)) if not isinstance(item_id, str) else self.index.get(item_id)
        if item is None or (item_id, path) in seen:
            return
        seen.add((item_id, path))
        (kind, v), = item["inner"].items()
        if kind == "module":
            for child in v["items"]:
                c = self.index.get(str(child))
                if c is None:
                    continue
                (ckind, cv), = c["inner"].items()
                if ckind == "use":
                    if not self.public(c):
                        continue
                    target = cv.get("id")
                    if cv.get("is_glob"):
                        t = self.index.get(str(target)) if target is not None else None
                        if t and "module" in t["inner"]:
                            for grandchild in t["inner"]["module"]["items"]:
                                g = self.index.get(str(grandchild))
                                if g and self.public(g) and g.get("name"):
                                    self.walk(grandchild, path + "::" + g["name"], seen)
                        else:
                            self.lines.add("pub use %s::*" % cv["source"])
                        continue
                    if target is not None and str(target) in self.index:
                        self.walk(target, path + "::" + cv["name"], seen)
                    else:
                        self.lines.add("pub use %s::%s as %s" % (path, cv["source"], cv["name"]))
                elif self.public(c) and c.get("name"):
                    self.walk(child, path + "::" + c["name"], seen)
            if path.count("::") > 0:
                self.lines.add("pub mod " + path)
            return
        if kind == "function":
            self.lines.add(self.fn_line(path, item, v))
        elif kind == "struct":
            self.lines.add("pub struct %s%s" % (path, self.generics_decl(v.get("generics", {}))))
            sk = v.get("kind", {})
            fields = []
            if isinstance(sk, dict) and "plain" in sk:
                fields = sk["plain"].get("fields", [])
            elif isinstance(sk, dict) and "tuple" in sk:
                fields = [f for f in sk["tuple"] if f is not None]
            for fid in fields:
                f = self.index.get(str(fid))
                if f and self.public(f):
                    self.lines.add("pub %s::%s: %s" % (path, f["name"], self.ty(f["inner"]["struct_field"])))
            self.impls(path, v.get("impls", []))
        elif kind == "enum":
            self.lines.add("pub enum %s%s" % (path, self.generics_decl(v.get("generics", {}))))
            for vid in v.get("variants", []):
                var = self.index.get(str(vid))
                if var is None:
                    continue
                vk = var["inner"]["variant"].get("kind")
                line = "%s::%s" % (path, var["name"])
                if isinstance(vk, dict) and "tuple" in vk:
                    line += "(%s)" % ", ".join(self.ty(self.index[str(f)]["inner"]["struct_field"])
                                               for f in vk["tuple"] if f is not None and str(f) in self.index)
                elif isinstance(vk, dict) and "struct" in vk:
                    line += " { %s }" % ", ".join("%s: %s" % (self.index[str(f)]["name"],
                                                              self.ty(self.index[str(f)]["inner"]["struct_field"]))
                                                  for f in vk["struct"].get("fields", []) if str(f) in self.index)
                attrs = " ".join(str(a) for a in var.get("attrs", []))
                if "non_exhaustive" in attrs:
                    line = "#[non_exhaustive] " + line
                self.lines.add(line)
            self.impls(path, v.get("impls", []))
        elif kind == "trait":
            self.lines.add("pub trait %s%s" % (path, self.generics_decl(v.get("generics", {}))))
            for tid in v.get("items", []):
                t = self.index.get(str(tid))
                if t is None:
                    continue
                (tk, tv), = t["inner"].items()
                tpath = "%s::%s" % (path, t["name"])
                if tk == "function":
                    self.lines.add(self.fn_line(tpath, t, tv) + ("" if tv.get("has_body") else " (required)"))
                elif tk in ("assoc_type", "assoc_const"):
                    self.lines.add("%s %s" % (tk.replace("assoc_", ""), tpath))
        elif kind in ("constant", "assoc_const"):
            t = v.get("type")
            self.lines.add("pub const %s: %s" % (path, self.ty(t)))
        elif kind == "static":
            self.lines.add("pub static %s: %s" % (path, self.ty(v.get("type"))))
        elif kind == "type_alias":
            self.lines.add("pub type %s = %s" % (path, self.ty(v.get("type"))))
        elif kind == "macro":
            self.lines.add("macro %s!" % path)
        else:
            self.lines.add("%s %s" % (kind, path))

    def generics_decl(self, generics):
        names = [p["name"] for p in generics.get("params", []) if "type" in p.get("kind", {})]
        return "<%s>" % ", ".join(names) if names else ""

    def impls(self, path, impl_ids):
        for iid in impl_ids:
            imp = self.index.get(str(iid))
            if imp is None:
                continue
            iv = imp["inner"]["impl"]
            if iv.get("is_synthetic", iv.get("synthetic")) or iv.get("blanket_impl") is not None:
                continue
            trait = iv.get("trait")
            if trait is not None:
                name = self.path_name(trait)
                self.lines.add("impl %s%s for %s" % ("!" if iv.get("is_negative", iv.get("negative")) else "", name,
                                                     path))
                continue
            for mid in iv.get("items", []):
                m = self.index.get(str(mid))
                if m is None or not self.public(m):
                    continue
                (mk, mv), = m["inner"].items()
                mpath = "%s::%s" % (path, m["name"])
                if mk == "function":
                    self.lines.add(self.fn_line(mpath, m, mv))
                elif mk in ("constant", "assoc_const"):
                    self.lines.add("pub const %s: %s" % (mpath, self.ty(mv.get("type"))))


def api_of(crate):
    doc = rustdoc_json(crate)
    api = Api(doc)
    api.walk(doc["root"], crate.replace("-", "_"), set())
    return sorted(api.lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("crates", nargs="*", default=CRATES)
    args = parser.parse_args()
    changed = []
    for crate in args.crates:
        lines = api_of(crate)
        path = os.path.join(ROOT, "api", crate + ".txt")
        text = "".join(line + "\n" for line in lines)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        if old == text:
            continue
        changed.append(crate)
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                       "api/%s.txt (committed)" % crate, "%s (the code)" % crate))
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    if args.check and changed:
        sys.exit("public_api: the public API of %s changed without api/ changing with it: run "
                 "scripts/public_api.py, review the difference above and commit it" % ", ".join(changed))
    print("public_api: %s" % ("wrote " + ", ".join(changed) if changed and not args.check else "unchanged"))


if __name__ == "__main__":
    main()
