// config/: the one toolkit every section parser reads its part of llmgw.yaml with, so every section
// reports problems in the same words. A leaf: every folder may use it, it uses only errors/.
export { MapReader, deepFreeze, nearest, readList, readMap, shown, unknownKeyMessage } from './fields.js';
export type { Issues, SectionParser } from './fields.js';
