// The managed-auth login sites of tests/fixtures/sites for the Python suite: started here on a
// host port the instances may reach; the first stdout line is {port, origin} and the fixture's
// credentials as JSON; the sites close when stdin does.
import { PASSWORD, SMS_CODE, USER, startSites } from '../fixtures/sites/sites.mjs';

const sites = await startSites();
process.stdout.write(`${JSON.stringify({ port: sites.port, origin: sites.origin, user: USER, password: PASSWORD, sms_code: SMS_CODE })}\n`);
process.stdin.resume();
process.stdin.on('end', async () => {
  await sites.close();
  process.exit(0);
});
