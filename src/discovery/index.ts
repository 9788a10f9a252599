// Discovery: what GPUs this node has, MIG instances in place of their cards, and the rule a MIG
// profile must follow. Parsers are pure; running nvidia-smi is `discoverWithSmi`.
export type { Card, Device, Exclusion, GpuProcess, Inventory, InventorySource, Memory, MigInstance, MigMode, Wear } from './types.js';
export { cardClass, isMigClass, migClass } from './classes.js';
export { parseXml, childOf, elementsOf, textOf, type XmlElement, type XmlNode } from './xml.js';
export { parseSmiList, type ListedGpu, type ListedMig } from './smi-list.js';
export { parseSmiQuery, type Queried, type QueriedGpu, type QueriedMig } from './smi-query.js';
export { parseSmiQueryText } from './smi-query-text.js';
export { parseSmiCsv, type CsvRow } from './smi-csv.js';
export {
  deviceLabel,
  gpuInfoOf,
  inventoryFromSmi,
  labelOfDeviceNumber,
  migDeviceNumber,
  splitDeviceNumber,
  usableDevices,
  type SmiOutputs,
  type Usable,
} from './inventory.js';
export { inventoryFromNvml, loadNvml, profileFromMigName, type Nvml, type NvmlHandle } from './nvml.js';
export { csvFields, discoverWithSmi, runNvidiaSmi, type SmiOptions } from './run-smi.js';
export { migProfileIssues, type MigRuleIssue, type MigRuleProfile } from './mig-rule.js';
export { cardLines, memoryText, wearText } from './views.js';
