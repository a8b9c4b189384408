# Writes a pyproject.toml's [project] dependencies as a requirements file, run by build.mjs in the
# app's build sandbox with Debian's python3 (tomllib): the project itself is never built.
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f).get("project", {})
deps = project.get("dependencies", [])
if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
    sys.exit("pyproject.toml: [project] dependencies must be a list of requirement strings")
with open(sys.argv[2], "w", encoding="utf-8") as out:
    out.write("".join(d + "\n" for d in deps))
print(f"{len(deps)} dependencies from pyproject.toml")
