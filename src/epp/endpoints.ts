// What the EPP routes among: the endpoints of one InferencePool, as a discovery source reports them.
// The file source (file-discovery.ts) and the Kubernetes one both produce this shape, so the picker
// never knows where its endpoints came from.

/** One endpoint of the pool: a pod's address and port (a data-parallel rank's port is its own endpoint). */
export interface PoolEndpoint {
  name: string;
  address: string;
  port: number;
  labels: Record<string, string>;
}

/** Where the pool's endpoints come from; onChange hears every new full list. */
export interface DiscoverySource {
  /**
   * Resolves once current() is the source's first full list. Until then the EPP reports itself not
   * ready: an EPP answering from an empty list before its first sync would send every request a 503.
   */
  synced(): Promise<void>;
  current(): PoolEndpoint[];
  onChange(fn: (eps: PoolEndpoint[]) => void): void;
  close(): Promise<void>;
}
