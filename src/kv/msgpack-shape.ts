// A linear pre-scan of an untrusted msgpack payload, before the real decoder sees it.
//
// @msgpack/msgpack keeps its own stack of open containers and allocates each array at the length
// its header claims. Ten megabytes of 0x93 (an array of three arrays of three ...) nests ten
// million deep and took 12 s to reject with the event loop blocked; ten megabytes of 0xdc
// exhausted the heap and killed the process. A KV event batch nests about seven deep and no
// container can hold more items than there are bytes left, so both are refused here, in one pass
// that allocates nothing but a small stack.

/** Nesting deep enough for any vLLM batch (batch, events, event, extra_keys, key, tuple) with room. */
export const MAX_MSGPACK_DEPTH = 32;

/** Why `bytes` cannot be one well-formed msgpack value within the limits, or undefined if it can. */
export function msgpackShapeProblem(bytes: Uint8Array, maxDepth = MAX_MSGPACK_DEPTH): string | undefined {
  const n = bytes.length;
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  // Items still owed by each open container; the bottom entry is the one top-level value.
  const owed: number[] = [1];
  let p = 0;
  while (owed.length > 0) {
    const top = owed.length - 1;
    if ((owed[top] ?? 0) === 0) {
      owed.pop();
      continue;
    }
    owed[top] = (owed[top] ?? 0) - 1;
    if (p >= n) return `truncated at byte ${p}: a value is missing`;
    const b = bytes[p] ?? 0;
    let head = 1;
    let body = 0;
    let items = -1; // a container's item count (a map's entries count twice)
    if (b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) head = 1;
    else if (b >= 0x80 && b <= 0x8f) items = (b & 0x0f) * 2;
    else if (b >= 0x90 && b <= 0x9f) items = b & 0x0f;
    else if (b >= 0xa0 && b <= 0xbf) body = b & 0x1f;
    else {
      const need = (k: number): boolean => p + 1 + k <= n;
      switch (b) {
        case 0xcc: case 0xd0: head = 2; break;
        case 0xcd: case 0xd1: head = 3; break;
        case 0xce: case 0xd2: case 0xca: head = 5; break;
        case 0xcf: case 0xd3: case 0xcb: head = 9; break;
        case 0xc4: case 0xd9: if (!need(1)) return `truncated at byte ${p}`; head = 2; body = dv.getUint8(p + 1); break;
        case 0xc5: case 0xda: if (!need(2)) return `truncated at byte ${p}`; head = 3; body = dv.getUint16(p + 1); break;
        case 0xc6: case 0xdb: if (!need(4)) return `truncated at byte ${p}`; head = 5; body = dv.getUint32(p + 1); break;
        case 0xdc: if (!need(2)) return `truncated at byte ${p}`; head = 3; items = dv.getUint16(p + 1); break;
        case 0xdd: if (!need(4)) return `truncated at byte ${p}`; head = 5; items = dv.getUint32(p + 1); break;
        case 0xde: if (!need(2)) return `truncated at byte ${p}`; head = 3; items = dv.getUint16(p + 1) * 2; break;
        case 0xdf: if (!need(4)) return `truncated at byte ${p}`; head = 5; items = dv.getUint32(p + 1) * 2; break;
        default: return `byte ${p}: type 0x${b.toString(16)} is not used in KV event batches`;
      }
    }
    p += head + body;
    if (p > n) return `truncated: a value at byte ${p - head - body} runs past the end (${n} bytes)`;
    if (items > 0) {
      // Every item takes at least one byte, so a header claiming more than is left is a lie.
      if (items > n - p) return `byte ${p - head}: a container claims ${items} items with ${n - p} bytes left`;
      if (owed.length >= maxDepth) return `nested deeper than ${maxDepth} levels at byte ${p - head}`;
      owed.push(items);
    }
  }
  if (p !== n) return `${n - p} bytes after the batch`;
  return undefined;
}
