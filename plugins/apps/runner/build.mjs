// An app's build, inside its build sandbox (plugins/apps/README.md, "Builds"): npm, or the venv
// and pip, as the sandbox's unprivileged user, with the code at /srv/app and the venv at
// /srv/venv. The sandbox has no network: the one way out is the server's registry proxy on
// /run/hangar/proxy.sock, which this script serves to the package managers as an HTTP proxy on
// 127.0.0.1. Their configuration is the one given here (environment and command line, which
// win over any file); the archive's own client files were removed before the build.
//
//   node build.mjs <job.json>   job: {kind: "node"|"python", app_dir, venv, proxy_socket,
//                                     npm, python, runner_dir, ca_file?, cache_dir?}
// Output goes to stdout/stderr (the build log); the one result line, {ok, error?}, to fd 3.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, writeSync } from 'node:fs';
import net from 'node:net';

const job = JSON.parse(readFileSync(process.argv[2], 'utf8'));

function finish(result) {
  writeSync(3, JSON.stringify(result) + '\n');
  process.exit(0);
}

// 127.0.0.1:<port> → the server's proxy; CONNECT requests pass through unchanged.
async function proxyUrl() {
  const server = net.createServer((client) => {
    const upstream = net.connect(job.proxy_socket);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.pipe(upstream).pipe(client);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  server.unref();
  return `http://127.0.0.1:${server.address().port}`;
}

// Runs one command with the build's output; resolves to "" or how it ended.
function run(command, args, env, cwd = job.app_dir) {
  console.log(`$ ${[command, ...args].join(' ')}`);
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'inherit', 'inherit'] });
    child.on('error', (err) => resolve(`${command} did not start (${err.code || err.message})`));
    child.on('exit', (code, signal) =>
      resolve(code === 0 ? '' : `${command.split('/').pop()} failed (${signal ? `signal ${signal}` : `exit code ${code}`})`),
    );
  });
}

const proxy = await proxyUrl();
const base = {
  PATH: '/usr/local/bin:/usr/bin:/bin',
  HOME: '/home/kernel',
  TMPDIR: '/tmp',
  LANG: 'C.UTF-8',
};

if (job.kind === 'node') {
  // npm_config_* in the environment rank above every .npmrc; the user config is ours (none).
  const env = {
    ...base,
    NODE_ENV: 'development',
    npm_config_userconfig: '/dev/null',
    npm_config_registry: 'https://registry.npmjs.org/',
    npm_config_proxy: proxy,
    npm_config_https_proxy: proxy,
    npm_config_noproxy: '',
    npm_config_ignore_scripts: 'true',
    npm_config_git: 'git',
    npm_config_update_notifier: 'false',
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    ...(job.ca_file ? { npm_config_cafile: job.ca_file } : {}),
    ...(job.cache_dir ? { npm_config_cache: `${job.cache_dir}/npm` } : {}),
  };
  const has = (name) => existsSync(`${job.app_dir}/${name}`);
  let why = '';
  if (has('package-lock.json')) {
    why = await run(job.npm, ['ci', '--ignore-scripts', '--no-audit', '--no-fund'], env);
  } else if (has('node_modules')) {
    console.log('no package-lock.json: using the node_modules in the archive');
  } else {
    // Kernel's templates list package-lock.json in .gitignore, which the CLI honours: the
    // archive has none. Resolve from package.json then, and say the build is not pinned.
    console.log(
      'no package-lock.json in the archive: npm install resolves the versions from package.json (add the lockfile for a reproducible build)',
    );
    why = await run(job.npm, ['install', '--ignore-scripts', '--no-audit', '--no-fund'], env);
  }
  finish(why ? { ok: false, error: `installing dependencies failed: ${why}` } : { ok: true });
}

// Python: the venv made here, at the path it is used at, so its scripts' shebangs are right.
const env = { ...base, PIP_CONFIG_FILE: '/dev/null', PYTHONDONTWRITEBYTECODE: '1', PYTHONUNBUFFERED: '1' };
let requirements = `${job.app_dir}/requirements.txt`;
if (!existsSync(requirements)) {
  requirements = '/tmp/pyproject-requirements.txt';
  const why = await run(job.python, [`${job.runner_dir}/pyproject_deps.py`, `${job.app_dir}/pyproject.toml`, requirements], env);
  if (why) finish({ ok: false, error: `reading pyproject.toml failed: ${why}` });
}
let why = await run(job.python, ['-m', 'venv', job.venv], env);
if (why) finish({ ok: false, error: `creating the virtual environment failed: ${why}` });
why = await run(
  `${job.venv}/bin/python`,
  [
    '-m', 'pip', 'install', '--isolated', '--no-input', '--only-binary=:all:', '--disable-pip-version-check',
    '--no-warn-script-location', '--proxy', proxy, ...(job.ca_file ? ['--cert', job.ca_file] : []),
    ...(job.cache_dir ? ['--cache-dir', `${job.cache_dir}/pip`] : []),
    '-r', requirements,
  ],
  env,
);
finish(
  why
    ? { ok: false, error: `installing dependencies failed: ${why} (wheels only: a package without a wheel for this platform cannot be installed)` }
    : { ok: true },
);
