package harness

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runChecks runs body in one iteration; every check it makes must pass.
func runChecks(t *testing.T, imports, body string) runResult {
	t.Helper()
	res := runScript(t, imports+`
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
`+body+`
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Greater(t, res.metric(t, "checks", "passes"), 0.0)
	return res
}

func TestEncoding_Base64AsK6(t *testing.T) {
	t.Parallel()
	runChecks(t, `import encoding, { b64encode, b64decode } from 'k6/encoding';`, `
  const raw = '\u00fb\u00ff hi?';
  const bytes = new Uint8Array([0xfb, 0xff, 0x20, 0x68, 0x69, 0x3f]).buffer;
  check(null, {
    'std is the default': () => b64encode('hello world') === 'aGVsbG8gd29ybGQ=',
    'std': () => b64encode(bytes, 'std') === '+/8gaGk/',
    'url': () => b64encode(bytes, 'url') === '-_8gaGk_',
    'rawstd drops padding': () => b64encode('hi', 'rawstd') === 'aGk',
    'rawurl': () => b64encode('hi', 'rawurl') === 'aGk',
    'default export has both': () => encoding.b64encode('hi') === 'aGk=' && typeof encoding.b64decode === 'function',
    'decode returns an ArrayBuffer': () => b64decode('aGVsbG8=') instanceof ArrayBuffer && b64decode('aGVsbG8=').byteLength === 5,
    'decode "s" returns a string': () => b64decode('aGVsbG8gd29ybGQ=', 'std', 's') === 'hello world',
    'decode rawurl': () => new Uint8Array(b64decode('-_8gaGk_', 'url'))[1] === 0xff && b64decode('aGk', 'rawurl', 's') === 'hi',
    'round trip of a typed array view': () => b64encode(new Uint8Array(bytes, 3, 2)) === 'aGk=',
    'bad input throws': () => { try { b64decode('***'); return false; } catch (e) { return /b64decode/.test(e.message); } },
    'unknown encoding throws': () => { try { b64encode('x', 'hex'); return false; } catch (e) { return /unknown encoding/.test(e.message); } },
  });
  void raw;`)
}

func TestCrypto_AsK6(t *testing.T) {
	t.Parallel()
	runChecks(t, `import crypto from 'k6/crypto';
import { sha256, hmac, createHash, createHMAC, randomBytes } from 'k6/crypto';`, `
  const d = 'hello world';
  check(null, {
    md5: () => crypto.md5(d, 'hex') === '5eb63bbbe01eeed093cb22bb8f5acdc3',
    sha1: () => crypto.sha1(d, 'hex') === '2aae6c35c94fcfb415dbe95f408b9ce91ee846ed',
    sha256: () => sha256(d, 'hex') === 'b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9',
    sha384: () => crypto.sha384(d, 'hex') === 'fdbd8e75a67f29f701a4e040385e2e23986303ea10239211af907fcbb83578b3e417cb71ce646efd0819dd8c088de1bd',
    sha512: () => crypto.sha512(d, 'hex') === '309ecc489c12d6eb4cc40f50c902f2b4d0ed77ee511a7c7a9bcd3ca86d4cd86f989dd35bc5ff499670da34255b45b0cfd830e81f605dcf7dc5542e93ae9cd76f',
    sha512_224: () => crypto.sha512_224(d, 'hex') === '22e0d52336f64a998085078b05a6e37b26f8120f43bf4db4c43a64ee',
    sha512_256: () => crypto.sha512_256(d, 'hex') === '0ac561fac838104e3f2e4ad107b4bee3e938bf15f2b15f009ccccd61a913f017',
    'base64url keeps padding': () => sha256(d, 'base64url') === 'uU0nuZNNPgilLlLX2n2r-sSE7-N6U4DukIj3rOLvzek=',
    'base64rawurl drops it': () => sha256(d, 'base64rawurl') === 'uU0nuZNNPgilLlLX2n2r-sSE7-N6U4DukIj3rOLvzek',
    'binary is an ArrayBuffer': () => { const b = sha256(d, 'binary'); return b instanceof ArrayBuffer && b.byteLength === 32 && new Uint8Array(b)[0] === 0xb9; },
    'ArrayBuffer input': () => crypto.md5(new Uint8Array([104, 105]).buffer, 'hex') === crypto.md5('hi', 'hex'),
    hmac: () => hmac('sha256', 'secret', d, 'hex') === '734cc62f32841568f45715aeb9f4d7891324e6d948e4c6c60c0621cdac48623a',
    'hmac base64': () => hmac('sha256', 'secret', d, 'base64') === 'c0zGLzKEFWj0VxWuufTXiRMk5tlI5MbGDAYhzaxIYjo=',
    'hmac md5': () => hmac('md5', 'secret', d, 'hex') === '78d6997b1230f38e59b6d1642dfaa3a4',
    createHash: () => { const h = createHash('sha1'); h.update('hello '); h.update('world'); return h.digest('hex') === '2aae6c35c94fcfb415dbe95f408b9ce91ee846ed'; },
    createHMAC: () => { const h = createHMAC('sha256', 'secret'); h.update('hello'); h.update(' world'); return h.digest('base64') === 'c0zGLzKEFWj0VxWuufTXiRMk5tlI5MbGDAYhzaxIYjo='; },
    randomBytes: () => { const b = randomBytes(16); return b instanceof ArrayBuffer && b.byteLength === 16; },
    'unknown algorithm throws': () => { try { hmac('md4', 'k', 'd', 'hex'); return false; } catch (e) { return /unsupported algorithm "md4"/.test(e.message); } },
    'unknown encoding throws': () => { try { sha256(d, 'base32'); return false; } catch (e) { return /unknown output encoding/.test(e.message); } },
  });`)
}

func TestSharedArray_BuiltOnceReadOnlySharedByEveryVU(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import { SharedArray } from 'k6/data';
import { check } from 'k6';
import { Counter } from 'k6/metrics';
const builds = new Counter('builds');
let built = 0;
const users = new SharedArray('users', function () {
  built++;
  console.log('BUILDING users');
  return [{ name: 'ann', tags: ['a'] }, { name: 'bob', tags: [] }, 3, 'four', null, undefined];
});
const again = new SharedArray('users', () => { throw new Error('the second declaration must not build'); });
export const options = { vus: 3, iterations: 6, thresholds: { checks: ['rate==1'] } };
export default function () {
  'use strict';
  check(users, {
    'length': (u) => u.length === 6,
    'index': (u) => u[0].name === 'ann' && u[2] === 3 && u[3] === 'four' && u[4] === null && u[5] === null,
    'out of range': (u) => u[6] === undefined,
    'for of': (u) => { let n = 0; for (const x of u) { n++; void x; } return n === 6; },
    'array methods': (u) => u.filter((x) => x && x.name).map((x) => x.name).join(',') === 'ann,bob',
    'same name, same data': () => again.length === 6 && again[1].name === 'bob',
    'writes throw': (u) => { try { u[0] = 1; return false; } catch (e) { return e instanceof TypeError; } },
    'elements are frozen': (u) => { try { u[0].name = 'x'; return false; } catch (e) { return u[0].name === 'ann'; } },
    'nested values are frozen': (u) => { try { u[0].tags.push('b'); return false; } catch (e) { return u[0].tags.length === 1; } },
    'push throws': (u) => { try { u.push(1); return false; } catch (e) { return u.length === 6; } },
  });
  builds.add(built);
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 1, strings.Count(res.stderr, "BUILDING users"), "built once for the whole run")
	assert.Equal(t, 0.0, res.metricOrZero(t, "builds", "count"), "VUs other than the builder never ran the function")
	assert.Equal(t, 60.0, res.metric(t, "checks", "passes"))
}

func TestSharedArray_Misuse(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, init, body, want string }{
		{"outside init", ``, `new SharedArray('late', () => [])`, "must be called in the init context"},
		{"not an array", `new SharedArray('obj', () => ({ a: 1 }));`, ``, "only arrays can be shared"},
		{"no name", `new SharedArray('', () => []);`, ``, "a non-empty name is required"},
		{"the function throws", `new SharedArray('boom', () => { throw new Error('data file missing'); });`, ``, "data file missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runScript(t, `
import { SharedArray } from 'k6/data';
`+tc.init+`
export const options = { iterations: 1 };
export default function () { `+tc.body+` }
`, nil)
			if tc.body != "" {
				require.NoError(t, res.err)
				assert.Contains(t, res.stderr, tc.want)
				return
			}
			require.Error(t, res.err)
			assert.Equal(t, ExitScriptException, ExitCode(res.err))
			assert.Contains(t, res.err.Error(), tc.want)
		})
	}
}
