// The two e2e tiers. `make test` sets HANGAR_E2E_TIER=fast: it runs each plugin's main paths and
// skips what `slow` marks (tests that wait out real timeouts, churn under load, repeat a path
// another test covers at a larger size); `make test-all` and CI run every test.
//
//   import { slow } from './lib/tier.mjs';
//   test('an idle timeout saves the profile too', slow, async () => { ... });
//   test('with options', { ...slow, timeout: 60_000 }, async () => { ... });

export const fastTier = process.env.HANGAR_E2E_TIER === 'fast';

/** Test options that skip the test in the fast tier, naming where it runs. */
export const slow = fastTier ? { skip: 'slow tier: make test-all runs it' } : {};
