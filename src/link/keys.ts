// CURVE keys for the agent link. ZeroMQ's CURVE keys are X25519 keys written in Z85; a node proves
// it holds the secret half of the key listed for its name by answering the gateway's challenge with
// an HMAC under the X25519 secret it shares with the gateway's one-time key. CURVE alone proves
// only that the key is one of the listed ones: without the proof any listed node could say it is
// another and have its blocks accepted for that node's replicas.
import { createHmac, createPrivateKey, createPublicKey, diffieHellman, generateKeyPairSync, timingSafeEqual, type KeyObject } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { curveKeyPair } from 'zeromq';
import { LlmgwError } from '../errors/index.js';

const alphabet = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#';
const z85Value = new Map([...alphabet].map((c, i) => [c, i]));

/** A CURVE keypair, both halves in Z85 (40 characters each). */
export interface KeyPair {
  readonly publicKey: string;
  readonly secretKey: string;
}

/** The 32 bytes of a Z85 key, or undefined when `text` is not 40 Z85 characters. */
export function z85Decode(text: string): Uint8Array | undefined {
  if (text.length !== 40) return undefined;
  const out = new Uint8Array(32);
  for (let i = 0; i < 8; i++) {
    let v = 0;
    for (let j = 0; j < 5; j++) {
      const d = z85Value.get(text[i * 5 + j] ?? '');
      if (d === undefined) return undefined;
      v = v * 85 + d;
    }
    if (v > 0xffff_ffff) return undefined;
    out[i * 4] = Math.floor(v / 2 ** 24) & 0xff;
    out[i * 4 + 1] = (v >>> 16) & 0xff;
    out[i * 4 + 2] = (v >>> 8) & 0xff;
    out[i * 4 + 3] = v & 0xff;
  }
  return out;
}

/** Z85 text of 32 bytes (how ZeroMQ and the config write keys). */
export function z85Encode(bytes: Uint8Array): string {
  let out = '';
  for (let i = 0; i < bytes.length; i += 4) {
    let v = (((bytes[i] ?? 0) * 256 + (bytes[i + 1] ?? 0)) * 256 + (bytes[i + 2] ?? 0)) * 256 + (bytes[i + 3] ?? 0);
    let chunk = '';
    for (let j = 0; j < 5; j++) {
      chunk = (alphabet[v % 85] ?? '') + chunk;
      v = Math.floor(v / 85);
    }
    out += chunk;
  }
  return out;
}

/** A new random keypair. */
export function makeKeyPair(): KeyPair {
  const k = curveKeyPair();
  return { publicKey: k.publicKey, secretKey: k.secretKey };
}

/** The text of a key file: both halves on their own lines, as `llmgw keys` writes it. */
export function keyFileText(k: KeyPair): string {
  return `# llmgw CURVE keypair: give the public line to the other side; keep this file private (mode 600)\npublic ${k.publicKey}\nsecret ${k.secretKey}\n`;
}

/** Writes a key file readable by its owner only. */
export function writeKeyFile(path: string, k: KeyPair): void {
  writeFileSync(path, keyFileText(k), { mode: 0o600, flag: 'wx' });
}

/** Reads a key file written by `llmgw keys`; throws LlmgwError naming the file when it is not one. */
export function readKeyFile(path: string): KeyPair {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new LlmgwError('LLMGW_KEY_FILE', `key file ${JSON.stringify(path)} cannot be read (${e instanceof Error ? e.message : String(e)}); make one with llmgw keys --out ${path}`, { cause: e });
  }
  const field = (name: string): string | undefined => text.split('\n').find((l) => l.startsWith(`${name} `))?.slice(name.length + 1).trim();
  const publicKey = field('public');
  const secretKey = field('secret');
  if (publicKey === undefined || secretKey === undefined || z85Decode(publicKey) === undefined || z85Decode(secretKey) === undefined) {
    throw new LlmgwError('LLMGW_KEY_FILE', `key file ${JSON.stringify(path)} has no "public" and "secret" lines of 40 Z85 characters each; make a new one with llmgw keys --out FILE`);
  }
  if (derivedPublic(secretKey) !== publicKey) {
    throw new LlmgwError('LLMGW_KEY_FILE', `key file ${JSON.stringify(path)}: its public key is not the one of its secret key; make a new one with llmgw keys --out FILE`);
  }
  return { publicKey, secretKey };
}

const b64 = (bytes: Uint8Array): string => Buffer.from(bytes).toString('base64url');

function publicKeyObject(raw: Uint8Array): KeyObject {
  return createPublicKey({ key: { kty: 'OKP', crv: 'X25519', x: b64(raw) }, format: 'jwk' });
}

function secretKeyObject(z85Secret: string): KeyObject {
  const d = z85Decode(z85Secret);
  if (d === undefined) throw new LlmgwError('LLMGW_KEY', 'a secret key is not 40 Z85 characters; make a new keypair with llmgw keys');
  // Node derives the public half itself; x is required by JWK but ignored for the agreement.
  return createPrivateKey({ key: { kty: 'OKP', crv: 'X25519', d: b64(d), x: b64(new Uint8Array(32)) }, format: 'jwk' });
}

function derivedPublic(z85Secret: string): string {
  const jwk = createPublicKey(secretKeyObject(z85Secret)).export({ format: 'jwk' });
  return typeof jwk.x === 'string' ? z85Encode(Buffer.from(jwk.x, 'base64url')) : '';
}

/** The gateway's side of one challenge: a one-time key to send, and the check of the answer. */
export interface Challenge {
  /** The one-time public key (raw 32 bytes) the node agrees a secret with. */
  readonly key: Uint8Array;
  readonly nonce: Uint8Array;
  /** Whether `proof` was made with the secret half of `nodePublicKey` (Z85) for `node`. */
  verify(node: string, nodePublicKey: string, proof: Uint8Array): boolean;
}

function mac(shared: Buffer, nonce: Uint8Array, node: string): Buffer {
  return createHmac('sha256', shared).update(nonce).update(node).digest();
}

/** A new challenge with its own one-time key. */
export function newChallenge(nonce: Uint8Array): Challenge {
  const eph = generateKeyPairSync('x25519');
  const jwk = eph.publicKey.export({ format: 'jwk' });
  const key = typeof jwk.x === 'string' ? new Uint8Array(Buffer.from(jwk.x, 'base64url')) : new Uint8Array(32);
  return {
    key,
    nonce,
    verify(node, nodePublicKey, proof) {
      const raw = z85Decode(nodePublicKey);
      if (raw === undefined || proof.length !== 32) return false;
      const want = mac(diffieHellman({ privateKey: eph.privateKey, publicKey: publicKeyObject(raw) }), nonce, node);
      return timingSafeEqual(want, proof);
    },
  };
}

/** The node's answer to a challenge: proves it holds `secretKey` without sending it. */
export function proveKey(secretKey: string, challengeKey: Uint8Array, nonce: Uint8Array, node: string): Uint8Array {
  if (challengeKey.length !== 32) return new Uint8Array(32);
  return new Uint8Array(mac(diffieHellman({ privateKey: secretKeyObject(secretKey), publicKey: publicKeyObject(challengeKey) }), nonce, node));
}
