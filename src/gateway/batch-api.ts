// What the Batch API routes (routes-batch.ts) ask of the batch service, apart from the routes so the
// gateway's context can name it without importing a route file.

/** What the batch routes ask of the batch service (src/batch's BatchService satisfies it). */
export interface BatchApi {
  readonly maxFileBytes: number;
  upload(owner: string, contentType: string | undefined, body: Buffer): Promise<unknown>;
  listFiles(owner: string, params: URLSearchParams): Promise<unknown>;
  file(owner: string, id: string): Promise<unknown>;
  fileContent(owner: string, id: string): Promise<string>;
  deleteFile(owner: string, id: string): Promise<unknown>;
  createBatch(owner: string, ownerSha256: string, body: unknown): Promise<unknown>;
  batch(owner: string, id: string): Promise<unknown>;
  listBatches(owner: string, params: URLSearchParams): Promise<unknown>;
  cancelBatch(owner: string, id: string): Promise<unknown>;
}
