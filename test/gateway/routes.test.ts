// The route table: every surface declares its routes there, the admin API's included, and a path
// finds its route by exact path, then by `{name}` segments, then by prefix.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { routesOf, routeTable } from '../../src/gateway/routes.js';

const declared = (method: string, path: string) => routeTable.find((r) => r.method === method && r.path === path);

test('the admin API is in the route table, each route for admin keys only', () => {
  const admin = [
    ['GET', '/admin/v1/keys'],
    ['POST', '/admin/v1/keys'],
    ['GET', '/admin/v1/keys/{id}'],
    ['PATCH', '/admin/v1/keys/{id}'],
    ['DELETE', '/admin/v1/keys/{id}'],
    ['POST', '/admin/v1/keys/{id}/revoke'],
    ['POST', '/admin/v1/keys/{id}/rotate'],
    ['GET', '/admin/v1/usage'],
    ['GET', '/llmgw/{view}'],
  ] as const;
  for (const [method, path] of admin) assert.equal(declared(method, path)?.auth, 'admin', `${method} ${path}`);
  // Only issuing and updating a key read a body, and a key's JSON is small.
  assert.deepEqual(
    routeTable.filter((r) => r.path.startsWith('/admin/') && r.body !== 'none').map((r) => `${r.method} ${r.path} ${r.body}`),
    ['POST /admin/v1/keys admin', 'PATCH /admin/v1/keys/{id} admin'],
  );
  assert.ok(routeTable.filter((r) => r.path.startsWith('/admin/')).every((r) => !r.admission), 'the admin API never waits in a model queue');
});

test('a path finds its route: exact first, then {name} segments decoded, then a prefix', () => {
  assert.deepEqual(
    routesOf('/admin/v1/keys').routes.map((r) => r.method),
    ['GET', 'POST'],
  );
  const rotate = routesOf('/admin/v1/keys/team%20a/rotate');
  assert.deepEqual(rotate.params, { id: 'team a' });
  assert.deepEqual(rotate.routes.map((r) => `${r.method} ${r.path}`), ['POST /admin/v1/keys/{id}/rotate']);
  assert.deepEqual(routesOf('/v1/responses/resp_1').params, { id: 'resp_1' });
  assert.equal(routesOf('/debug/actors').routes[0]?.path, '/debug/');
});

test('a path that does not fit a pattern finds no route, rather than a wrong one', () => {
  const cases = [
    { why: 'an empty segment names no key', path: '/admin/v1/keys//rotate' },
    { why: 'a malformed escape names no key', path: '/admin/v1/keys/%E0/rotate' },
    { why: 'an extra segment is another path', path: '/admin/v1/keys/a/rotate/now' },
    { why: 'no route at all', path: '/admin/v1/nothing' },
  ];
  for (const c of cases) assert.deepEqual(routesOf(c.path).routes, [], c.why);
});
