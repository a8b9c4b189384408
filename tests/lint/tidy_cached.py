#!/usr/bin/env python3
"""clang-tidy over the tree with a cache of its findings, for `make lint`.

Each translation unit is keyed by what clang-tidy's verdict depends on: the preprocessed source
(every header it includes, at the lines they have), its compile flags, the .clang-tidy rules and
the clang-tidy version. A unit whose key was checked before gets its findings from the cache; the
others run, two at a time. The checkout's own path is taken out of the key and the findings, so
a clone in another folder (CI's) reuses what this one checked. `--all` ignores the cache.

Prints every finding (the lines clang-tidy prints) and exits 1 when there is one.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

ROOT_MARK = '@HANGAR_ROOT@'


def compile_args(entry):
    args = entry.get('arguments') or shlex.split(entry['command'])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ('-o', '-MF', '-MT', '-MQ'):
            skip = True
            continue
        if a in ('-c', '-MD', '-MMD') or a == entry['file']:
            continue
        out.append(a)
    if out and os.path.basename(out[0]) == 'ccache':
        out = out[1:]
    return out


def key_of(entry, root, salt):
    args = compile_args(entry)
    pre = subprocess.run(args + ['-E', entry['file']], cwd=entry['directory'], capture_output=True)
    if pre.returncode != 0:
        return None  # let clang-tidy say what is wrong
    h = hashlib.sha256(salt)
    h.update(' '.join(args[1:]).replace(root, ROOT_MARK).encode())
    h.update(pre.stdout.replace(root.encode(), ROOT_MARK.encode()))
    return h.hexdigest()


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--build', required=True)
    p.add_argument('--cache', default=os.path.expanduser('~/.cache/hangar-tidy'))
    p.add_argument('--jobs', type=int, default=2)
    p.add_argument('--all', action='store_true', help='check every unit again, cache or not')
    p.add_argument('patterns', nargs='+', help='regular expressions of the files to check (relative to the root)')
    a = p.parse_args()

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(a.build, 'compile_commands.json')) as f:
        entries = json.load(f)
    wanted = [re.compile(x) for x in a.patterns]
    units = [e for e in entries
             if any(w.search(os.path.relpath(e['file'], root)) for w in wanted)]
    tidy_version = subprocess.run(['clang-tidy', '--version'], capture_output=True).stdout
    with open(os.path.join(root, '.clang-tidy'), 'rb') as f:
        salt = tidy_version + f.read()
    os.makedirs(a.cache, exist_ok=True)

    def check(entry):
        key = None if a.all else key_of(entry, root, salt)
        cached = os.path.join(a.cache, key) if key else None
        if cached and os.path.exists(cached):
            with open(cached) as f:
                return f.read().replace(ROOT_MARK, root), True
        run = subprocess.run(['clang-tidy', '-p', a.build, '--quiet', entry['file']],
                             capture_output=True, text=True)
        text = run.stdout + run.stderr
        if key is None and not a.all:
            return text, False
        key = key or key_of(entry, root, salt)
        if key:
            tmp = os.path.join(a.cache, key + '.tmp')
            with open(tmp, 'w') as f:
                f.write(text.replace(root, ROOT_MARK))
            os.replace(tmp, os.path.join(a.cache, key))
        return text, False

    findings, hits = [], 0
    finding = re.compile(r'(host|plugins|sdk)/[^ ]*:[0-9]+:[0-9]+: (warning|error):')
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for text, hit in pool.map(check, units):
            hits += hit
            for line in text.splitlines():
                if finding.search(line):
                    findings.append(line)
    print(f'clang-tidy: {len(units)} units, {hits} from the cache, {len(units) - hits} checked', file=sys.stderr)
    for line in sorted(set(findings)):
        print(line)
    return 1 if findings else 0


if __name__ == '__main__':
    sys.exit(main())
