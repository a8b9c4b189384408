#!/usr/bin/env python3
"""Converts an OpenAPI fragment written in YAML to JSON at build time.

    openapi_yaml.py IN.yaml OUT.json            the JSON file a plugin installs beside its .so
    openapi_yaml.py IN.yaml OUT.cpp --cpp NAME  a C++ source defining `extern const char NAME[]`

YAML is what the fragments are written in (shorter, commented); JSON is what the host reads, so
the server needs no YAML parser. Fails on anything that is not a mapping, or on YAML tags.
"""
import json
import sys

import yaml


def main() -> int:
    args = sys.argv[1:]
    if len(args) not in (2, 4) or (len(args) == 4 and args[2] != "--cpp"):
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = args[0], args[1]
    with open(src, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict):
        print(f"{src}: the document must be a mapping", file=sys.stderr)
        return 1
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    with open(dst, "w", encoding="utf-8") as out:
        if len(args) == 4:
            name = args[3]
            # Chunks keep each literal short of compilers' limits; adjacent literals concatenate.
            out.write(f"// Generated from {src} by openapi_yaml.py: do not edit.\n")
            out.write("namespace hangar::host {\n")
            out.write(f"extern const char {name}[];\nconst char {name}[] =\n")
            for i in range(0, len(text), 4000):
                out.write('    R"oapi(' + text[i:i + 4000] + ')oapi"\n')
            out.write(";\n}\n")
        else:
            out.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
