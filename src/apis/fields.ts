// Narrowing a client protocol's body from `unknown`, field by field: a wrong type or an unknown
// field is a 400 naming it. A field we do not know may change the answer (a new sampling knob, a
// hosted tool), so it is refused rather than dropped.
import { RequestError } from '../errors/index.js';

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A 400 for the client, naming the field at fault. */
export const badField = (param: string, message: string): RequestError => new RequestError('LLMGW_BAD_REQUEST', `${param}: ${message}`, param);

const shown = (v: unknown): string => (JSON.stringify(v) ?? String(v)).slice(0, 80);

/** A reader of one JSON object's fields; `at` is its path in the body ("input[2]"). */
export class Fields {
  constructor(
    readonly body: Readonly<Record<string, unknown>>,
    readonly at: string,
  ) {}

  static of(v: unknown, at: string): Fields {
    if (!isRecord(v)) throw badField(at || 'body', `${shown(v)} is not a JSON object`);
    return new Fields(v, at);
  }

  path(key: string): string {
    return this.at === '' ? key : `${this.at}.${key}`;
  }

  /** Refuses any field not in `known`, naming it and what this endpoint takes. */
  only(known: ReadonlySet<string>, what: string): this {
    for (const k of Object.keys(this.body)) {
      if (!known.has(k)) throw badField(this.path(k), `unknown or unsupported field of ${what}; this gateway takes ${[...known].join(', ')}`);
    }
    return this;
  }

  has(key: string): boolean {
    const v = this.body[key];
    return v !== undefined && v !== null;
  }

  string(key: string): string | undefined {
    const v = this.body[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'string') throw badField(this.path(key), `${shown(v)} is not a string`);
    return v;
  }

  needString(key: string): string {
    const v = this.string(key);
    if (v === undefined) throw badField(this.path(key), 'is required (a string)');
    return v;
  }

  bool(key: string): boolean | undefined {
    const v = this.body[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'boolean') throw badField(this.path(key), `${shown(v)} is not true or false`);
    return v;
  }

  number(key: string): number | undefined {
    const v = this.body[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'number' || !Number.isFinite(v)) throw badField(this.path(key), `${shown(v)} is not a number`);
    return v;
  }

  positiveInt(key: string): number | undefined {
    const v = this.number(key);
    if (v !== undefined && !(Number.isInteger(v) && v > 0)) throw badField(this.path(key), `${v} is not a positive whole number`);
    return v;
  }

  list(key: string): readonly unknown[] | undefined {
    const v = this.body[key];
    if (v === undefined || v === null) return undefined;
    if (!Array.isArray(v)) throw badField(this.path(key), `${shown(v)} is not a list`);
    return v;
  }

  object(key: string): Fields | undefined {
    const v = this.body[key];
    if (v === undefined || v === null) return undefined;
    return Fields.of(v, this.path(key));
  }

  /** One of `allowed`, or a 400 listing them. */
  oneOf<T extends string>(key: string, allowed: readonly T[]): T | undefined {
    const v = this.string(key);
    if (v === undefined) return undefined;
    const hit = allowed.find((a) => a === v);
    if (hit === undefined) throw badField(this.path(key), `${shown(v)} is not supported here; send one of ${allowed.map((a) => `"${a}"`).join(', ')}`);
    return hit;
  }
}
