// Playwright pages and the CDP target ids the Kernel API names tabs by (`tab.target_id`,
// executors' `target_id`, custom tools' `source.target_id`).
const ids = new WeakMap();

export async function targetIdOf(page) {
  if (ids.has(page)) return ids.get(page);
  const session = await page.context().newCDPSession(page);
  try {
    const { targetInfo } = await session.send('Target.getTargetInfo');
    ids.set(page, targetInfo.targetId);
    return targetInfo.targetId;
  } finally {
    await session.detach().catch(() => {});
  }
}

// The Playwright page of a target this process just created; Playwright learns of it a moment
// after Target.createTarget answers.
export async function pageForTarget(context, targetId, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    for (const p of context.pages()) if ((await targetIdOf(p)) === targetId) return p;
    if (Date.now() > deadline) throw new Error(`the new tab ${targetId} did not appear`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
