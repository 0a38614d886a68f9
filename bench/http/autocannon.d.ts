// The part of autocannon 9's API the bench uses (the package ships no types).
declare module "autocannon" {
  interface RawRequest {
    method?: string;
    path?: string;
    headers?: Record<string, string>;
    body?: string;
  }
  interface Options {
    url: string;
    connections?: number;
    duration?: number;
    amount?: number;
    pipelining?: number;
    overallRate?: number;
    timeout?: number;
    headers?: Record<string, string>;
    requests?: { setupRequest?: (req: RawRequest, context: Record<string, unknown>) => RawRequest }[];
  }
  interface Result {
    duration: number;
    errors: number;
    timeouts: number;
    non2xx: number;
    requests: { total: number; average: number };
    statusCodeStats: Record<string, { count: number }>;
  }
  interface Instance {
    on(event: "response", listener: (client: unknown, statusCode: number, bytes: number, ms: number) => void): void;
    stop(): void;
  }
  function autocannon(opts: Options, cb: (err: Error | null, result: Result) => void): Instance;
  export default autocannon;
}
