// Starts the open-source Browserless server (npm @browserless.io/browserless, pinned in
// package.json) on Debian's Chromium, for the baselines of bench/burst.mjs. Its routes for
// Chrome, Edge, Firefox and WebKit are turned off: it refuses to start when their binaries are
// missing, and only its Chromium routes are measured. The caller points PLAYWRIGHT_BROWSERS_PATH
// at a folder whose playwright-core Chromium path links to /usr/lib/chromium/chromium.
import { Browserless, BrowserlessRoutes } from '@browserless.io/browserless';

const server = new Browserless();
server.disableRoutes(...Object.values(BrowserlessRoutes).filter((name) => /^(Chrome|Edge|Firefox|WebKit)/.test(name)));
await server.start();
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.once(signal, async () => {
    await server.stop();
    process.exit(0);
  });
}
